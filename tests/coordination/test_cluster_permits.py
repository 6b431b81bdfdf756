"""The cluster's provider semaphore on the real Redis: the scripts, the waiting line and its
wake-ups, leases that run out, and a Redis that goes away.

Each "node" is a `ClusterPermits` on its own `Link` (its own connection pool) and, where wake-ups
matter, its own `Bus`. Redis's clock cannot be moved, so leases here are short (0.5 s) and the
tests wait on the condition, bounded, never a fixed time.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from redis.asyncio import Redis

from agentos.config import CoordinationConfig
from agentos.coordination.bus import Bus
from agentos.coordination.link import Link
from agentos.coordination.permits import ClusterPermits, PermitStatistics
from agentos.coordination.semaphore import CAPPED, FULL, GRANTED, RedisSemaphore
from agentos.errors import ProviderLimitTimeout
from agentos.testing import eventually
from tests.conftest import REDIS_URL
from tests.coordination.conftest import RedisProxy

Nodes = Callable[..., Awaitable[ClusterPermits]]


@pytest.fixture
async def redis() -> AsyncIterator[Redis]:
    client = Redis.from_url(REDIS_URL)
    yield client
    await client.aclose()


@pytest.fixture
async def nodes(prefix: str, link_factory: Callable[..., Awaitable[Link]]) -> AsyncIterator[Nodes]:
    made: list[ClusterPermits] = []
    buses: list[Bus] = []

    async def make(limit: int = 2, cap: int | None = None, lease_s: float = 10.0, **options: Any) -> ClusterPermits:
        url = options.pop("url", REDIS_URL)
        retry_s = options.pop("retry_s", 30.0)  # by default only a "released" message wakes a waiter in time
        link = await link_factory(url, **options)
        bus = Bus(CoordinationConfig(redis_url=url, key_prefix=prefix, timeout_s=0.5))
        await bus.start()
        buses.append(bus)
        await bus.wait_connected()
        name = f"node{len(made)}"
        node = ClusterPermits(link, bus, name, limit=limit, cap=cap or limit, lease_s=lease_s, retry_s=retry_s)
        await node.start()
        made.append(node)
        return node

    yield make
    for node in made:
        await node.close()
    for bus in buses:
        await bus.close()


async def test_the_script_grants_up_to_the_limit_and_a_release_frees_one(redis: Redis, prefix: str) -> None:
    semaphore = RedisSemaphore(redis, prefix, limit=3, cap=3, lease_s=10)
    answers = [await semaphore.acquire(f"n/{i}", "t") for i in range(4)]
    assert answers == [(GRANTED, 1), (GRANTED, 2), (GRANTED, 3), (FULL, 3)]
    assert await semaphore.acquire("n/0", "t") == (GRANTED, 3)  # a holder asking again keeps its slot
    assert await semaphore.release("n/1") is True
    assert await semaphore.release("n/1") is False  # twice: nothing more is given back
    assert await semaphore.acquire("n/3", "t") == (GRANTED, 3)
    assert await redis.hget(f"{prefix}permits:held", "t") == b"3"


async def test_one_call_acquires_and_releases_many_in_order(redis: Redis, prefix: str) -> None:
    """What a busy node sends: the streams starting (or ending) together, in one Lua call."""
    semaphore = RedisSemaphore(redis, prefix, limit=5, cap=3, lease_s=10)
    first = await semaphore.acquire_many([(f"n/a{i}", "a", False) for i in range(4)] + [("n/b0", "b", False)])
    assert first == [GRANTED] * 4 + [GRANTED]  # b was not active before: a could take 4 of 5
    assert await semaphore.acquire_many([("n/a0", "a", False), ("n/c0", "c", False)]) == [GRANTED, FULL]
    assert await semaphore.release_many(["n/a1", "n/a2", "n/nope"]) == 2  # an unknown member frees nothing
    later = await semaphore.acquire_many([("n/a5", "a", False), ("n/a6", "a", False), ("n/c0", "c", False)])
    assert later == [GRANTED, CAPPED, GRANTED]  # a is at its cap of 3 now that others are active
    assert await semaphore.holders(redis) == 5
    assert await redis.hget(f"{prefix}permits:held", "a") == b"3"


async def test_with_several_tenants_one_may_not_take_the_reserve(redis: Redis, prefix: str) -> None:
    semaphore = RedisSemaphore(redis, prefix, limit=5, cap=3, lease_s=10)
    alone = [(await semaphore.acquire(f"n/a{i}", "a"))[0] for i in range(5)]
    assert alone == [GRANTED] * 5  # one tenant active cluster-wide: the whole pool
    for i in range(5):
        await semaphore.release(f"n/a{i}")
    assert (await semaphore.acquire("n/b0", "b"))[0] == GRANTED  # a second tenant is active now
    taken = [(await semaphore.acquire(f"n/a{i}", "a"))[0] for i in range(4)]
    assert taken == [GRANTED, GRANTED, GRANTED, CAPPED]  # a holds at most cap = limit - reserve
    assert await semaphore.acquire("n/c0", "c") == (GRANTED, 5)  # the reserve is the others'
    assert (await semaphore.acquire("n/c1", "c"))[0] == FULL


async def test_a_holder_that_stops_refreshing_loses_its_slot_within_the_lease(redis: Redis, prefix: str) -> None:
    dead = RedisSemaphore(redis, prefix, limit=1, cap=1, lease_s=0.5)
    assert (await dead.acquire("dead/1", "t"))[0] == GRANTED
    alive = RedisSemaphore(redis, prefix, limit=1, cap=1, lease_s=0.5)
    assert (await alive.acquire("alive/1", "t"))[0] == FULL

    async def granted() -> bool:
        return (await alive.acquire("alive/1", "t"))[0] == GRANTED

    loop = asyncio.get_running_loop()
    started = loop.time()
    await eventually(granted, timeout_s=3.0, what="the dead holder's lease to run out")
    assert loop.time() - started < 1.0  # within the lease (0.5 s), with room for a slow machine
    assert await redis.hgetall(f"{prefix}permits:owner") == {b"alive/1": b"t"}  # counted off its tenant


async def test_refresh_counts_again_what_redis_lost(redis: Redis, prefix: str) -> None:
    semaphore = RedisSemaphore(redis, prefix, limit=5, cap=5, lease_s=10)
    assert (await semaphore.acquire("n/1", "t"))[0] == GRANTED
    assert await semaphore.refresh([("n/1", "t")]) == 0
    await redis.delete(*(f"{prefix}permits:{k}" for k in ("holders", "owner", "held")))  # a Redis restart
    assert await semaphore.refresh([("n/1", "t"), ("n/2", "u")]) == 2
    assert await semaphore.holders(redis) == 2
    assert await redis.hgetall(f"{prefix}permits:held") == {b"t": b"1", b"u": b"1"}


async def test_the_heartbeat_keeps_a_slot_past_its_lease(nodes: Nodes) -> None:
    a = await nodes(limit=1, lease_s=0.5)
    b = await nodes(limit=1, lease_s=0.5, retry_s=0.05)  # b tries every 50 ms: it would see a lapse
    await a.acquire("s1", "t", 1.0)
    with pytest.raises(ProviderLimitTimeout):
        await b.acquire("s2", "t", 1.5)  # three leases: a's heartbeat renewed it each time
    a.release("s1")
    await b.acquire("s2", "t", 5.0)


async def test_a_release_on_one_node_wakes_a_waiter_on_another(nodes: Nodes) -> None:
    a, b = await nodes(limit=2), await nodes(limit=2)
    await a.acquire("a1", "t", 1.0)
    await a.acquire("a2", "t", 1.0)
    waiters = []
    for i in range(3):  # one after the other: streams asking at the same moment race to Redis
        waiters.append(asyncio.create_task(b.acquire(f"b{i}", "t", 10.0)))
        await eventually(lambda: b.waiting == len(waiters), what="the waiter in b's line")
    loop = asyncio.get_running_loop()
    started = loop.time()
    a.release("a1")  # b's retry is 30 s: only the "released" message can wake it in time
    done, _ = await asyncio.wait(waiters, timeout=5.0, return_when=asyncio.FIRST_COMPLETED)
    assert loop.time() - started < 2.0
    assert done == {waiters[0]}  # the head of the line, not any waiter
    a.release("a2")
    await asyncio.wait_for(waiters[1], 5.0)
    assert not waiters[2].done() and b.held.keys() == {"b0", "b1"}
    waiters[2].cancel()
    await asyncio.gather(waiters[2], return_exceptions=True)
    assert b.waiting == 0


async def test_a_waiter_gives_up_at_its_deadline_and_holds_nothing(nodes: Nodes, redis: Redis, prefix: str) -> None:
    a = await nodes(limit=1)
    await a.acquire("a1", "t", 1.0)
    with pytest.raises(ProviderLimitTimeout, match="no provider permit in time"):
        await a.acquire("a2", "t", 0.2)
    a.release("a1")
    await eventually(lambda: _zero(redis, prefix), what="nothing held")
    assert a.held == {} and a.waiting == 0


async def _zero(redis: Redis, prefix: str) -> bool:
    return int(await redis.zcard(f"{prefix}permits:holders")) == 0


async def test_redis_down_the_node_grants_its_share_and_counts_again_after(
    nodes: Nodes, redis_proxy: RedisProxy, redis: Redis, prefix: str
) -> None:
    limit, expected = 5, 2
    node = await nodes(limit=limit, url=redis_proxy.url, timeout_s=0.2, expected_nodes=expected, retry_s=0.2)
    share = math.ceil(limit / expected)
    await node.acquire("before", "t", 1.0)  # granted in Redis, held through the outage
    redis_proxy.mode = "silent"
    for i in range(share - 1):
        await node.acquire(f"alone{i}", "t", 2.0)  # no hang: the link's timeout, then the share
    assert len(node.held) == share
    with pytest.raises(ProviderLimitTimeout):
        await node.acquire("over", "t", 0.5)  # never more than the share, never unlimited
    late = asyncio.create_task(node.acquire("late", "t", 5.0))
    node.release("before")  # a local release is enough to grant within the share
    await asyncio.wait_for(late, 5.0)
    redis_proxy.mode = "forward"

    async def counted_again() -> bool:
        members = await redis.zrange(f"{prefix}permits:holders", 0, -1)
        return {m.decode() for m in members if isinstance(m, bytes)} == {f"node0/{s}" for s in node.held}

    await eventually(counted_again, timeout_s=10.0, what="the node's open streams to be in Redis again")
    assert len(node.held) == share


async def test_a_cancelled_waiter_leaves_no_slot_behind(nodes: Nodes, redis: Redis, prefix: str) -> None:
    a = await nodes(limit=1)
    await a.acquire("a1", "t", 1.0)
    waiter = asyncio.create_task(a.acquire("a2", "t", 10.0))
    await eventually(lambda: a.waiting == 1, what="a2 waiting")
    a.release("a1")
    waiter.cancel()  # cancelled around the moment it may be granted: either way nothing leaks
    await asyncio.gather(waiter, return_exceptions=True)
    if waiter.cancelled():
        await eventually(lambda: _zero(redis, prefix), what="nothing held after the cancel")
    else:
        assert a.held.keys() == {"a2"}


async def test_every_acquire_that_returns_holds_a_slot_and_the_limit_holds(
    nodes: Nodes, redis: Redis, prefix: str
) -> None:
    a, b = await nodes(limit=3), await nodes(limit=3)
    holding: set[str] = set()
    peak = 0

    async def stream(node: ClusterPermits, stream_id: str) -> None:
        nonlocal peak
        await node.acquire(stream_id, "t", 10.0)
        assert stream_id in node.held  # granted for real, not woken by a pass for someone else
        holding.add(stream_id)
        peak = max(peak, len(holding), int(await redis.zcard(f"{prefix}permits:holders")))
        holding.discard(stream_id)
        node.release(stream_id)

    await asyncio.gather(*(stream(a if i % 2 else b, f"s{i}") for i in range(40)))
    assert peak == 3


async def test_a_waiter_whose_tenant_is_at_its_cap_lets_another_tenant_pass(nodes: Nodes) -> None:
    x, y = await nodes(limit=3, cap=2), await nodes(limit=3, cap=2)
    await x.acquire("a1", "a", 1.0)
    await x.acquire("a2", "a", 1.0)
    capped = asyncio.create_task(y.acquire("a3", "a", 10.0, shared=True))  # a holds its cap: 2 of 3
    await eventually(lambda: y.waiting == 1, what="a3 in y's line")
    await y.acquire("b1", "b", 2.0)  # behind a3 in the line, granted past it: the reserve is b's
    assert not capped.done() and y.held.keys() == {"b1"}
    x.release("a1")  # a is below its cap again: the release wakes y, and a3 gets the slot
    await asyncio.wait_for(capped, 5.0)
    assert y.held.keys() == {"a3", "b1"}


async def test_a_redis_that_lost_the_slots_grants_none_until_the_nodes_counted_theirs_again(
    nodes: Nodes, redis: Redis, prefix: str
) -> None:
    a, b = await nodes(limit=2, lease_s=1.5), await nodes(limit=2, lease_s=1.5)  # heartbeats every 0.5 s
    await a.acquire("a1", "t", 1.0)
    await b.acquire("b1", "t", 1.0)
    keys = [key async for key in redis.scan_iter(match=f"{prefix}permits:*")]
    await redis.delete(*keys)  # what a Redis restarted without persistence holds of them: nothing
    waiter = asyncio.create_task(a.acquire("a2", "t", 10.0))
    await eventually(lambda: a.statistics().waiting == 1, what="a2 in a's line")
    # The provider has a1 and b1 open: a2 waits, first for the hold-off (both heartbeats put a1
    # and b1 back meanwhile), then for a slot (the old code granted it at once: 3 streams, limit 2).
    done, _ = await asyncio.wait([waiter], timeout=2.0)
    assert not done
    assert await semaphore_members(redis, prefix) == {"node0/a1", "node1/b1"}
    assert (a.statistics().held, a.statistics().restored_total, b.statistics().restored_total) == (1, 1, 1)
    b.release("b1")
    await asyncio.wait_for(waiter, 5.0)
    assert a.statistics() == PermitStatistics(held=2, waiting=0, restored_total=1)


async def semaphore_members(redis: Redis, prefix: str) -> set[str]:
    return {m.decode() for m in await redis.zrange(f"{prefix}permits:holders", 0, -1) if isinstance(m, bytes)}


async def test_a_node_counts_its_slots_again_as_soon_as_its_bus_reconnects(
    nodes: Nodes, redis_proxy: RedisProxy, redis: Redis, prefix: str
) -> None:
    node = await nodes(limit=2, lease_s=60.0, url=redis_proxy.url)  # a heartbeat every 20 s
    await node.acquire("s1", "t", 1.0)
    await redis_proxy.stop()  # Redis restarts: every connection breaks...
    keys = [key async for key in redis.scan_iter(match=f"{prefix}permits:*")]
    await redis.delete(*keys)  # ...and it comes back empty
    await redis_proxy.start()
    # The bus's reconnect puts s1 back at once (the old code: at the next heartbeat, 20 s later).
    await eventually(lambda: _members_are(redis, prefix, {"node0/s1"}), timeout_s=5.0, what="s1 in Redis again")


async def _members_are(redis: Redis, prefix: str, members: set[str]) -> bool:
    return await semaphore_members(redis, prefix) == members
