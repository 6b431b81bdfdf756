"""The pacer releases waiters in waves of `per_iteration`, one wave per loop iteration, in order."""

from __future__ import annotations

import asyncio

from agentos.agents.pacer import Pacer


async def test_waiters_go_in_waves_in_order() -> None:
    pacer = Pacer(per_iteration=3)
    released: list[int] = []

    async def wait(i: int) -> None:
        await pacer.wait()
        released.append(i)

    tasks = [asyncio.create_task(wait(i)) for i in range(7)]
    seen: list[int] = []
    while len(released) < 7:
        await asyncio.sleep(0)  # one loop iteration (a yield, no time passes)
        seen.append(len(released))
    await asyncio.gather(*tasks)
    assert released == list(range(7))
    waves = [b - a for a, b in zip([0, *seen], seen, strict=False) if b > a]
    assert max(waves) <= 3 and sum(waves) == 7 and len(waves) >= 3
    assert len(pacer) == 0


async def test_a_cancelled_waiter_takes_no_place_in_a_wave() -> None:
    pacer = Pacer(per_iteration=1)
    first = asyncio.create_task(pacer.wait())
    second = asyncio.create_task(pacer.wait())
    await asyncio.sleep(0)  # both queued
    first.cancel()
    async with asyncio.timeout(5):
        await second
    assert first.cancelled()
