"""A tenant's "at once" cap held in the real Redis for every node (`ClusterHolds`): the cap
counts the holders of all nodes, a release frees a place, a holder of a node that stopped
(no release, no heartbeat) is gone within its lease, Redis down each node admits its share,
and a Redis that lost its data admits nobody new until the nodes have put their holders back.

Each "node" is a `ClusterHolds` on its own `Link` (its own connection pool).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from redis.asyncio import Redis

from agentos.clock import MonotonicClock
from agentos.config import CoordinationConfig
from agentos.config.tenants import TenantLimits
from agentos.coordination.bus import Bus
from agentos.coordination.holds import ClusterHolds
from agentos.coordination.link import Link
from agentos.coordination.permits import ClusterPermits
from agentos.kernel import HumanAnswered, HumanRequested, Kernel, KernelLimits, RunEnded, RunSubmitted
from agentos.runtime.driver import Driver
from agentos.testing import eventually
from tests.conftest import REDIS_URL
from tests.coordination.conftest import RedisProxy

Links = Callable[..., Awaitable[Link]]


async def node(
    link_factory: Links, name: str, lease_s: float = 10.0, hold_s: float | None = None, **config: Any
) -> ClusterHolds:
    link = await link_factory(config.pop("url", REDIS_URL), **config)
    return ClusterHolds(link, name, "turns", lease_s=lease_s, hold_s=hold_s)


async def forget_everything(prefix: str) -> None:
    """What a Redis restarted without persistence holds of this test: nothing (only the test's
    keys go: the shared Redis is never flushed)."""
    redis = Redis.from_url(REDIS_URL)
    try:
        keys = [key async for key in redis.scan_iter(match=f"{prefix}*")]
        assert keys
        await redis.delete(*keys)
    finally:
        await redis.aclose()


async def test_the_cap_counts_the_holders_of_every_node(link_factory: Links) -> None:
    a, b = await node(link_factory, "a"), await node(link_factory, "b")
    assert [await a.acquire("t1", "acme", 3), await a.acquire("t2", "acme", 3), await b.acquire("t3", "acme", 3)] == [
        True,
        True,
        True,
    ]
    assert not await a.acquire("t4", "acme", 3)  # 3 in the cluster, not 3 per node
    assert not await b.acquire("t4", "acme", 3)
    assert await b.acquire("o1", "other", 1)  # another tenant counts apart
    a.release("t1")
    await eventually(lambda: b.acquire("t4", "acme", 3), what="the freed place taken on the other node")
    assert b.held == {"t3": "acme", "o1": "other", "t4": "acme"}
    assert await a.count("acme") == 3


async def test_acquiring_concurrently_never_admits_more_than_the_cap(link_factory: Links) -> None:
    a, b = await node(link_factory, "a"), await node(link_factory, "b")
    tries = [(a if i % 2 else b).acquire(f"t{i}", "acme", 5) for i in range(40)]
    assert sum(await asyncio.gather(*tries)) == 5  # batched per node, decided atomically in Redis


async def test_a_stopped_nodes_holders_are_gone_within_the_lease(link_factory: Links) -> None:
    dead, alive = await node(link_factory, "dead", lease_s=0.5), await node(link_factory, "alive", lease_s=0.5)
    assert await dead.acquire("t1", "acme", 2) and await dead.acquire("t2", "acme", 2)
    assert not await alive.acquire("t3", "acme", 2)
    loop = asyncio.get_running_loop()
    stopped = loop.time()  # `dead` neither releases nor renews from here on: like kill -9
    await eventually(lambda: alive.acquire("t3", "acme", 2), what="a place once the lease ran out")
    assert loop.time() - stopped < 0.5 + 1.0


async def test_the_heartbeat_keeps_the_holders_past_their_lease(link_factory: Links) -> None:
    a, b = await node(link_factory, "a", lease_s=0.5), await node(link_factory, "b", lease_s=0.5)
    assert await a.acquire("t1", "acme", 1)
    loop = asyncio.get_running_loop()
    until = loop.time() + 1.5  # three leases, renewed as `ClusterPermits`' heartbeat does (every lease / 3)
    while loop.time() < until:
        await a.refresh()
        assert not await b.acquire("t2", "acme", 1)
        await asyncio.sleep(0.15)  # the heartbeat's period, not a wait for an event
    await a.close()  # gives its place back
    await eventually(lambda: b.acquire("t2", "acme", 1), what="the place given back on close")


async def test_redis_down_each_node_admits_its_share_of_the_cap(link_factory: Links, redis_proxy: RedisProxy) -> None:
    a = await node(link_factory, "a", url=redis_proxy.url, expected_nodes=2, timeout_s=0.3)
    assert await a.acquire("t1", "acme", 3)  # through Redis
    await redis_proxy.stop()
    assert await a.acquire("t2", "acme", 3)  # alone: ceil(3 / 2) = 2 of this node's own
    assert not await a.acquire("t3", "acme", 3)
    a.release("t1")
    assert await a.acquire("t3", "acme", 3)
    assert await a.acquire("u1", "unlimited-elsewhere", 1)  # ceil(1 / 2) = 1: a cap of 1 still admits one


async def test_a_tenant_without_the_cap_costs_no_redis_call(link_factory: Links, redis_proxy: RedisProxy) -> None:
    link = await link_factory(redis_proxy.url, timeout_s=0.3)
    driver = Driver(Kernel(KernelLimits()), MonotonicClock(), turn_holds=ClusterHolds(link, "a", "turns", lease_s=10.0))
    driver.configure_tenant("capped", TenantLimits(max_concurrent_turns=1))
    await redis_proxy.stop()  # any call now fails, and the link says so
    assert await driver.hold_turn("t1", "free")  # no cap: decided without Redis
    assert not link.down
    assert await driver.hold_turn("t2", "capped")  # the cap: asked of Redis (down: this node's share)
    assert link.down


async def test_a_runs_place_follows_the_kernels_count(link_factory: Links) -> None:
    a, b = [Driver(Kernel(KernelLimits()), MonotonicClock(), run_holds=await node(link_factory, n)) for n in "ab"]
    for driver in (a, b):
        driver.configure_tenant("acme", TenantLimits(max_active_runs=1))
    holds = a.run_holds
    assert holds is not None
    assert await a.hold_run("r1", "acme", None)
    a.handle(RunSubmitted("r1", None, "acme"))
    assert not await b.hold_run("r2", "acme", None)  # the cap is the cluster's
    a.handle(HumanRequested("r1", "r1:1", 1, None, 1e9, None, "acme"))  # parked: no task, no place
    await eventually(lambda: b.hold_run("r2", "acme", None), what="b taking the parked run's place")
    b.handle(RunSubmitted("r2", None, "acme"))
    a.handle(HumanAnswered("r1", "r1:1"))  # answered: never refused, but counted again
    await eventually(lambda: _equals(holds.count("acme"), 2), what="the answered run counted")
    a.handle(RunEnded("r1", "completed"))
    await eventually(lambda: _equals(holds.count("acme"), 1), what="the ended run's place given back")
    a.close()
    b.close()


async def _equals(count: Awaitable[int], expected: int) -> bool:
    return await count == expected


async def test_a_redis_that_lost_the_holders_admits_none_until_the_nodes_counted_theirs_again(
    link_factory: Links, prefix: str
) -> None:
    a, b = await node(link_factory, "a", hold_s=0.5), await node(link_factory, "b", hold_s=0.5)
    assert await a.acquire("t1", "acme", 2) and await b.acquire("t2", "acme", 2)
    await forget_everything(prefix)  # t1 and t2 still run, but Redis counts 0 of them
    assert not await a.acquire("t3", "acme", 2)  # held off (the old code admitted it: 3 running, cap 2)
    a.add("r1", "elsewhere")  # never refused, a hold-off neither: counted at once
    await eventually(lambda: _equals(a.count("elsewhere"), 1), what="the added holder counted")
    await a.refresh()  # the heartbeats put t1 and t2 back
    await b.refresh()
    assert (await a.count("acme"), a.restored_total, b.restored_total) == (2, 1, 1)
    assert not await b.acquire("t3", "acme", 2)  # the count is the truth again: at the cap
    a.release("t1")
    await eventually(lambda: b.acquire("t3", "acme", 2), what="a place once the hold-off ended")


async def test_a_redis_restart_gets_a_nodes_holders_back_at_its_bus_reconnect(
    link_factory: Links, redis_proxy: RedisProxy, prefix: str
) -> None:
    """As `agentos serve` wires them: the holds renewed by the provider permits' heartbeat,
    here one every 20 s, so only the reconnect can put the holder back in time."""
    url, lease_s = redis_proxy.url, 60.0
    bus = Bus(CoordinationConfig(redis_url=url, key_prefix=prefix, timeout_s=0.5))
    await bus.start()
    await bus.wait_connected()
    link = await link_factory(url)  # one link for both, as the server's: a failed call of either marks it down
    permits = ClusterPermits(link, bus, "a", limit=4, cap=4, lease_s=lease_s)
    holds = ClusterHolds(link, "a", "turns", lease_s=lease_s, hold_s=permits.hold_s)
    permits.renew_also(holds.refresh)
    await permits.start()
    other = await node(link_factory, "b", lease_s=lease_s)
    try:
        assert await holds.acquire("t1", "acme", 2) and await other.acquire("t2", "acme", 2)
        await redis_proxy.stop()  # Redis restarts: every connection breaks...
        await forget_everything(prefix)  # ...and it comes back empty
        await redis_proxy.start()
        assert not await other.acquire("t3", "acme", 2)  # held off: a's t1 may not be back yet
        # Read through b's connections: a's pool may still hold the broken ones.
        await eventually(lambda: _equals(other.count("acme"), 1), timeout_s=5.0, what="t1 back in Redis")
        assert holds.restored_total == 1
    finally:
        await permits.close()
        await holds.close()
        await bus.close()
