"""The driver with the cluster's slots: a run's model call (`acquire_permit`) needs the kernel's
permit and a cluster slot; a cluster wait that runs out gives the kernel's permit back too."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from agentos.clock import MonotonicClock
from agentos.coordination.link import Link
from agentos.coordination.permits import ClusterPermits
from agentos.errors import ProviderLimitTimeout
from agentos.kernel import Kernel, KernelLimits
from agentos.runtime.driver import Driver

Drivers = Callable[[], Awaitable[Driver]]


@pytest.fixture
async def drivers(link_factory: Callable[..., Awaitable[Link]]) -> AsyncIterator[Drivers]:
    made: list[Driver] = []

    async def make() -> Driver:
        name = f"node{len(made)}"
        cluster = ClusterPermits(await link_factory(), None, name, limit=2, cap=2, lease_s=10, retry_s=0.05)
        await cluster.start()
        driver = Driver(Kernel(KernelLimits(concurrency_limit=2, permit_wait_timeout_s=0.5)), MonotonicClock(), cluster)
        made.append(driver)
        return driver

    yield make
    for driver in made:
        driver.close()
        assert driver.cluster is not None
        await driver.cluster.close()


async def test_a_run_stream_takes_both_and_gives_both_back(drivers: Drivers) -> None:
    a, b = await drivers(), await drivers()
    assert a.cluster is not None and b.cluster is not None
    await a.acquire_permit("s1")
    await a.acquire_permit("s2")
    assert a.cluster.held.keys() == {"s1", "s2"}
    with pytest.raises(ProviderLimitTimeout, match="no provider permit in time"):
        await b.acquire_permit("s3")  # b's kernel grants at once; the cluster is full
    assert b.kernel.statistics().permits_in_use == 0  # the kernel's permit went back with the wait
    a.release_permit("s1")
    await b.acquire_permit("s4")  # within b's 0.5 s: a's release came back through Redis
    assert b.cluster.held.keys() == {"s4"} and a.cluster.held.keys() == {"s2"}
    assert b.kernel.statistics().permits_in_use == 1
