"""The Lua GCRA in the real Redis: burst, steady rate, Retry-After, refusal, refund, expiry.

No test sleeps: time is moved by rewriting a key's stored theoretical arrival time (TAT, integer
microseconds of Redis `TIME`) back by the time that should have passed, which is exactly what
waiting would do to the algorithm. Times read back are compared with a tolerance of what a
few round trips can take.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
from redis.asyncio import Redis

from agentos.coordination.gcra import RedisGcra
from agentos.coordination.link import Link

LinkFactory = Callable[..., Awaitable[Link]]
SLACK_S = 0.5  # round trips between the script's TIME and the test's reading


async def pass_time(redis: Redis, key: str, seconds: float) -> None:
    """As if `seconds` went by for `key`: its TAT moves back (the expiry with it)."""
    stored = await redis.get(key)
    assert stored is not None, key
    tat = int(stored)
    ttl = await redis.pttl(key)
    await redis.set(key, str(tat - int(seconds * 1_000_000)), px=max(1, ttl - int(seconds * 1000)))


async def test_a_burst_of_the_limit_then_one_per_interval(link_factory: LinkFactory, prefix: str) -> None:
    link = await link_factory()
    gcra, key = RedisGcra(link.redis), f"{prefix}k"
    decisions = [(await gcra.take([(key, 3)]))[0] for _ in range(4)]
    assert [d.allowed for d in decisions] == [True, True, True, False]
    assert [d.remaining for d in decisions] == [2, 1, 0, 0]
    assert all(abs(d.reset - 20) < SLACK_S for d in decisions)  # one unit back every 60 / 3 s
    refused = decisions[3]
    assert refused.limit == 3 and abs(refused.retry_after - 20) < SLACK_S
    await pass_time(link.redis, key, 20)  # steady rate: one unit per interval
    assert [d.allowed for d in [(await gcra.take([(key, 3)]))[0] for _ in range(2)]] == [True, False]
    await pass_time(link.redis, key, 19)
    again = (await gcra.take([(key, 3)]))[0]
    assert not again.allowed and abs(again.retry_after - 1) < SLACK_S  # Retry-After is exact


async def test_a_refusal_takes_nothing_from_either_limit(link_factory: LinkFactory, prefix: str) -> None:
    link = await link_factory()
    gcra, key, tenant = RedisGcra(link.redis), f"{prefix}key", f"{prefix}tenant"
    for _ in range(2):
        assert [d.allowed for d in await gcra.take([(key, 2), (tenant, 10)])] == [True, True]
    before = await link.redis.get(tenant)
    by_key, by_tenant = await gcra.take([(key, 2), (tenant, 10)])
    assert not by_key.allowed and by_tenant.allowed  # the tenant would allow it...
    assert by_tenant.remaining == 7  # ...counting this one as taken, as in process
    assert await link.redis.get(tenant) == before  # ...but nothing was taken from it
    (alone,) = await gcra.take([(tenant, 10)])
    assert alone.allowed and alone.remaining == 7


async def test_a_refund_gives_exactly_one_unit_back(link_factory: LinkFactory, prefix: str) -> None:
    link = await link_factory()
    gcra, key = RedisGcra(link.redis), f"{prefix}k"
    for _ in range(3):
        await gcra.take([(key, 3)])
    await gcra.refund(key, 3)
    assert [d.allowed for d in [(await gcra.take([(key, 3)]))[0] for _ in range(2)]] == [True, False]
    await gcra.refund(f"{prefix}never-used", 3)  # nothing to give back: no key appears
    assert await link.redis.exists(f"{prefix}never-used") == 0


async def test_keys_expire_when_their_bucket_is_full_again(link_factory: LinkFactory, prefix: str) -> None:
    link = await link_factory()
    gcra, key = RedisGcra(link.redis), f"{prefix}k"
    await gcra.take([(key, 6)])  # one unit: full again after 10 s
    ttl_ms = await link.redis.pttl(key)
    assert 10_000 - SLACK_S * 1000 < ttl_ms <= 10_000
    await gcra.refund(key, 6)  # back to a full bucket: the key means nothing
    assert await link.redis.exists(key) == 0


async def test_two_nodes_share_one_limit(link_factory: LinkFactory, prefix: str) -> None:
    """Two clients with their own connections (two nodes): the limit is the cluster's."""
    a, b = RedisGcra((await link_factory()).redis), RedisGcra((await link_factory()).redis)
    key = f"{prefix}shared"
    allowed = [(await node.take([(key, 4)]))[0].allowed for node in (a, b, a, b, a, b)]
    assert allowed == [True, True, True, True, False, False]


async def test_the_script_is_loaded_again_after_redis_forgets_it(link_factory: LinkFactory, prefix: str) -> None:
    link = await link_factory()
    gcra = RedisGcra(link.redis)
    assert (await gcra.take([(f"{prefix}k", 2)]))[0].allowed
    await link.redis.script_flush()  # as after a Redis restart: EVALSHA answers NOSCRIPT
    assert (await gcra.take([(f"{prefix}k", 2)]))[0].allowed
    assert not (await gcra.take([(f"{prefix}k", 2)]))[0].allowed


@pytest.mark.parametrize("rate", [1, 7, 60, 240])
async def test_the_burst_is_exactly_the_limit(link_factory: LinkFactory, prefix: str, rate: int) -> None:
    """Whole-microsecond intervals must not round a burst of q into q - 1 or q + 1. (At 240 per
    minute a unit comes back every 250 ms, far more than 241 local round trips take.)"""
    link = await link_factory()
    gcra, key = RedisGcra(link.redis), f"{prefix}k"
    allowed = [(await gcra.take([(key, rate)]))[0].allowed for _ in range(rate + 1)]
    assert allowed == [True] * rate + [False]
