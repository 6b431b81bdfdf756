"""The driver's own timer, on real time: the one test where a deadline fires because time passed.

Every other deadline test advances a FakeClock and ticks; this one checks the part they skip,
that the driver arms a real timer for `kernel.next_deadline()` and feeds `Tick` when it fires.
It waits on the command the tick produces, never on the clock."""

from __future__ import annotations

import asyncio

from agentos.clock import MonotonicClock
from agentos.kernel import EvictSession, Kernel, KernelLimits, SessionOpened
from agentos.runtime.driver import Driver


async def test_the_real_timer_fires_each_next_deadline_without_a_tick_call() -> None:
    driver = Driver(Kernel(KernelLimits(session_ttl_s=0.05)), MonotonicClock())
    evicted: asyncio.Queue[str] = asyncio.Queue()
    driver.on(EvictSession, lambda command: evicted.put_nowait(command.session_id))
    try:
        for session_id in ("first", "second"):  # the timer is armed again after it has fired
            driver.handle(SessionOpened(session_id))
            async with asyncio.timeout(5.0):
                assert await evicted.get() == session_id
            assert not driver.kernel.has_session(session_id)
    finally:
        driver.close()
