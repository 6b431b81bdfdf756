"""Budgets in the real Redis, three "nodes" (three links, each its own pool) on one namespace: a
burst across them never holds or spends past a budget, holds lapse by the clock passed in (a
FakeClock: nothing sleeps), and a Redis that is gone refuses only the calls a budget applies to."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from agentos.coordination.budgets import ClusterBudgets
from agentos.coordination.link import Link
from agentos.errors import BudgetExceeded, StoreUnavailable
from agentos.tenancy.budgets import CALL_HOLD_S
from agentos.testing import FakeClock
from tests.coordination.conftest import RedisProxy
from tests.tenancy.test_budgets import NOON, TODAY, Limits, estimate, spend

LinkFactory = Callable[..., Awaitable[Link]]
COUNTER = f"tenant:t1:day:{TODAY}"


async def nodes(link_factory: LinkFactory, limits: Limits, clock: FakeClock, n: int = 3) -> list[ClusterBudgets]:
    # 2 s, not 0.5: a burst of 300 scripts on a loaded 2-core machine must not read as an outage
    return [ClusterBudgets(clock, limits, await link_factory(timeout_s=2.0)) for _ in range(n)]


async def test_a_burst_over_three_nodes_holds_exactly_the_budget(link_factory: LinkFactory) -> None:
    limits = Limits(tenants={"t1": (10.0, 0.0), "t2": (1.0, 0.0)})
    budgets = await nodes(link_factory, limits, FakeClock(NOON))
    holds = await asyncio.gather(
        *(budgets[i % 3].reserve(estimate(0.1)) for i in range(300)), return_exceptions=True
    )  # every reservation arrives before any settles
    taken = [h for h in holds if not isinstance(h, BaseException)]
    refused = [h for h in holds if isinstance(h, BudgetExceeded)]
    assert (len(taken), len(refused)) == (100, 200)
    assert {e.budget for e in refused} == {"tenant:t1:day"}
    await asyncio.gather(*(budgets[i % 3].settle(h, spend(0.07)) for i, h in enumerate(taken)))
    assert await budgets[0].read_spent(COUNTER) == pytest.approx(7.0)
    await budgets[1].reserve(estimate(1.0, tenant_id="t2"))  # another tenant's budget is untouched


async def test_reserve_and_settle_at_once_on_three_nodes_never_spend_past_the_budget(
    link_factory: LinkFactory,
) -> None:
    budgets = await nodes(link_factory, Limits(tenants={"t1": (5.0, 0.0)}), FakeClock(NOON))

    async def calls(node: ClusterBudgets) -> int:
        done = 0
        for _ in range(60):
            try:
                hold = await node.reserve(estimate(0.1, key_id="k1"))
            except BudgetExceeded:
                continue
            await node.settle(hold, spend(0.1))
            done += 1
        return done

    done = sum(await asyncio.gather(*(calls(node) for node in budgets for _ in range(3))))
    assert done == 50
    assert await budgets[2].read_spent(COUNTER) == pytest.approx(5.0)


async def test_key_and_run_lines_across_nodes(link_factory: LinkFactory) -> None:
    limits = Limits(tenants={"t1": (100.0, 100.0)}, keys={"k1": (0.0, 1.0)})
    a, b = await nodes(link_factory, limits, FakeClock(NOON), 2)
    await a.settle(await a.reserve(estimate(0.6, key_id="k1")), spend(0.6, key_id="k1"))
    with pytest.raises(BudgetExceeded) as key_full:
        await b.reserve(estimate(0.6, key_id="k1"))
    assert key_full.value.budget == "key:k1:month" and key_full.value.retry_after_s is not None
    run: dict[str, Any] = {"run_id": "r1", "max_cost": 1.0}
    await a.settle(await a.reserve(estimate(0.6, **run)), spend(0.6, run_id="r1"))
    with pytest.raises(BudgetExceeded) as run_full:  # the run taken over by node b: same count
        await b.reserve(estimate(0.6, **run))
    assert run_full.value.budget == "run:r1"
    assert await a.read_spent(f"tenant:t1:day:{TODAY}") == pytest.approx(1.2)


async def test_holds_lapse_by_the_clock_and_the_admission_hold_is_taken_over(link_factory: LinkFactory) -> None:
    clock = FakeClock(NOON)
    a, b = await nodes(link_factory, Limits(tenants={"t1": (1.0, 0.0)}), clock, 2)
    await a.reserve(estimate(1.0))  # its node dies mid-call: never settled
    with pytest.raises(BudgetExceeded):
        await b.reserve(estimate(1.0))
    clock.advance(CALL_HOLD_S)
    admitted = await b.hold_call(estimate(0.5))
    b.bind(admitted, "turn_1")
    call = await b.reserve(estimate(1.0, call_id="turn_1"))  # topped up from 0.5 to 1.0, not held twice
    assert call.hold_id == admitted.hold_id
    await b.settle(call, spend(0.25))
    await a.reserve(estimate(0.75))
    assert await a.read_spent(COUNTER) == pytest.approx(0.25)


async def test_without_redis_a_budgeted_call_is_refused_and_an_unbudgeted_one_goes_on(
    link_factory: LinkFactory, redis_proxy: RedisProxy
) -> None:
    budgets = ClusterBudgets(FakeClock(NOON), Limits(tenants={"t1": (1.0, 0.0)}), await link_factory(redis_proxy.url))
    await budgets.reserve(estimate(0.5))
    await redis_proxy.stop()
    with pytest.raises(StoreUnavailable):
        await budgets.reserve(estimate(0.1))
    await budgets.reserve(estimate(0.1, tenant_id="t2"))  # no budget applies: nothing to ask Redis


async def test_the_first_node_seeds_redis_from_the_ledger_and_a_later_one_resets_nothing(
    link_factory: LinkFactory,
) -> None:
    from agentos.store.ledger import UsageRow
    from agentos.store.memory import MemoryStore

    store = MemoryStore()
    row: dict[str, Any] = {"model": "m", "target": "p/m", "completion_tokens": 4, "at_ms": int(NOON * 1000) - 1000}
    store.record_usage(UsageRow(tenant_id="t1", key_id="k1", cost=0.25, **row))
    store.record_usage(UsageRow(tenant_id="t1", cost=None, **{**row, "target": "free/m"}))
    limits = Limits(tenants={"t1": (1.0, 0.0)}, keys={"k1": (0.5, 0.0)})
    first, later = await nodes(link_factory, limits, FakeClock(NOON), 2)
    await first.seed(store)
    assert await first.read_spent(COUNTER) == pytest.approx(0.25)  # the unpriced call adds nothing
    assert await first.read_spent(f"key:k1:day:{TODAY}") == pytest.approx(0.25)
    await first.settle(await first.reserve(estimate(0.5)), spend(0.5))
    await later.seed(store)  # a node (re)starting later: the counters exist, nothing is reset
    assert await later.read_spent(COUNTER) == pytest.approx(0.75)
    with pytest.raises(BudgetExceeded):
        await later.reserve(estimate(0.3, key_id="k1"))  # 0.25 of the key's 0.5 spent before


async def test_a_redis_back_empty_is_seeded_from_the_ledger_again_before_anything_else(
    link_factory: LinkFactory, redis_proxy: RedisProxy, prefix: str
) -> None:
    from redis.asyncio import Redis

    from agentos.config import CoordinationConfig
    from agentos.store.ledger import UsageRow
    from agentos.store.memory import MemoryStore

    store = MemoryStore()
    store.record_usage(UsageRow(tenant_id="t1", model="m", target="p/m", cost=0.25, at_ms=int(NOON * 1000) - 1000))
    proxied = await link_factory(redis_proxy.url, timeout_s=2.0)
    config = CoordinationConfig(redis_url=redis_proxy.url, key_prefix=prefix, timeout_s=2.0)
    link = Link(proxied.redis, config, retry_s=0.0)  # probes Redis again at once after a failure
    budgets = ClusterBudgets(FakeClock(NOON), Limits(tenants={"t1": (1.0, 0.0)}), link)
    await budgets.seed(store)
    direct = Redis.from_url("redis://127.0.0.1:6379/0")
    try:
        await direct.delete(*[k async for k in direct.scan_iter(match=f"{prefix}budget:*")])  # Redis lost it all
    finally:
        await direct.aclose()
    await redis_proxy.stop()
    with pytest.raises(StoreUnavailable):
        await budgets.reserve(estimate(0.8))
    await redis_proxy.start()
    with pytest.raises(BudgetExceeded):  # 0.25 seeded again before this call: 1.05 of 1.0
        await budgets.reserve(estimate(0.8))
    assert await budgets.read_spent(COUNTER) == pytest.approx(0.25)
