"""The driver's own timer, on real time: the one test where a deadline fires because time passed.

Every other deadline test advances a FakeClock and ticks; this one checks the part they skip,
that the driver arms a real timer for `kernel.next_deadline()` and feeds `Tick` when it fires.
It waits on the command the tick produces, never on the clock. And who hears of a run's freed
place (`when_runs_free`), on a fake clock."""

from __future__ import annotations

import asyncio

from agentos.clock import MonotonicClock
from agentos.kernel import EvictSession, HumanRequested, Kernel, KernelLimits, RunEnded, RunSubmitted, SessionOpened
from agentos.runtime.driver import Driver
from agentos.testing import FakeClock


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


async def test_listeners_hear_when_a_tenants_runs_stop_counting() -> None:
    """A run that ends or parks on a human frees its tenant's place, once (`when_runs_free`);
    a parked run that ends, or one the kernel never admitted, frees nothing."""
    driver = Driver(Kernel(KernelLimits()), FakeClock())
    freed: list[tuple[str, int]] = []
    stop = driver.when_runs_free(lambda tenant, runs: freed.append((tenant, runs)))
    for run_id in ("a", "b", "c"):
        driver.handle(RunSubmitted(run_id, tenant_id="acme"))
    driver.handle(RunSubmitted("d", tenant_id="other"))
    driver.handle(RunEnded("a", "completed"))
    driver.handle(HumanRequested("b", "b:1", 1, None, deadline_s=60.0, tenant_id="acme"))
    driver.handle(RunEnded("b", "cancelled"))  # parked: its place was freed when it parked
    driver.handle(RunEnded("never-admitted", "failed"))
    driver.handle(RunEnded("d", "failed"))
    assert freed == [("acme", 1), ("acme", 1), ("other", 1)]
    stop()
    stop()  # a service closed twice stops twice
    driver.handle(RunEnded("c", "completed"))
    assert len(freed) == 3  # no longer listening
    driver.close()
