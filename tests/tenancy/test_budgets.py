"""Budgets as plain objects: reservation against every line at once, settling, lapsing holds,
periods rolling over, the unpriced rule, and a burst of concurrent reservations on one node
(a FakeClock on the epoch: nothing sleeps)."""

from __future__ import annotations

import asyncio
import calendar
from dataclasses import dataclass, field
from typing import Any

import pytest

from agentos.errors import BudgetExceeded
from agentos.providers.base import CallContext, Usage
from agentos.providers.metering import Estimate, Spend
from agentos.tenancy.budgets import (
    ADMISSION_HOLD_S,
    CALL_HOLD_S,
    DAY_S,
    Budgets,
    budget_lines,
    to_micros,
)
from agentos.testing import FakeClock

NOON = float(calendar.timegm((2026, 12, 31, 12, 0, 0)))  # the last day of a month
TODAY = int(NOON // DAY_S)


@dataclass
class Limits:
    tenants: dict[str, tuple[float, float]] = field(default_factory=dict)
    keys: dict[str, tuple[float, float]] = field(default_factory=dict)

    def tenant_budgets(self, tenant_id: str) -> tuple[float, float]:
        return self.tenants.get(tenant_id, (0.0, 0.0))

    def key_budgets(self, key_id: str) -> tuple[float, float]:
        return self.keys.get(key_id, (0.0, 0.0))


def estimate(worst: float | None = 1.0, **context: str | float) -> Estimate:
    who = CallContext(**{"tenant_id": "t1", **context})  # type: ignore[arg-type]  # the test's own keywords
    return Estimate(context=who, model="m", target="p/m", worst_cost=worst, max_tokens=100)


def spend(cost: float | None, **context: Any) -> Spend:
    return Spend(CallContext(**{"tenant_id": "t1", **context}), "m", "p/m", Usage(), cost, 0)


def test_lines_name_every_budget_set_and_only_those() -> None:
    limits = Limits(tenants={"t1": (10.0, 0.0)}, keys={"k1": (0.0, 2.5)})
    context = CallContext(tenant_id="t1", key_id="k1", run_id="r1", max_cost=0.5)
    lines = budget_lines(context, limits, NOON)
    assert [(line.budget, line.counter, line.limit) for line in lines] == [
        ("tenant:t1:day", f"tenant:t1:day:{TODAY}", 10_000_000),
        ("key:k1:month", "key:k1:month:2026-12", 2_500_000),
        ("run:r1", "run:r1", 500_000),
    ]
    assert lines[0].ends_s == (TODAY + 1) * DAY_S
    assert lines[1].ends_s == calendar.timegm((2027, 1, 1, 0, 0, 0))  # December rolls into a new year
    assert budget_lines(CallContext(tenant_id="t2", key_id="k2"), limits, NOON) == []


def test_to_micros_rounds_up_and_is_exact_for_decimal_prices() -> None:
    assert to_micros(0.0001) == 100  # 0.0001 * 1e6 is 100.00000000000001 in floats
    assert to_micros(0.0000001) == 1  # never counted short
    assert to_micros(0.0) == 0


async def test_reservations_hold_the_worst_case_until_the_budget_is_full() -> None:
    budgets = Budgets(FakeClock(NOON), Limits(tenants={"t1": (3.0, 0.0)}))
    holds = [await budgets.reserve(estimate(1.0)) for _ in range(3)]
    with pytest.raises(BudgetExceeded) as refused:
        await budgets.reserve(estimate(1.0))
    assert (refused.value.status, refused.value.code, refused.value.budget) == (402, "budget_exceeded", "tenant:t1:day")
    assert "'tenant:t1:day' (3)" in refused.value.message and "3 held" in refused.value.message
    assert refused.value.retry_after_s is None  # calls in flight may free it sooner than midnight
    await budgets.settle(holds[0], spend(0.25))  # the real cost replaces the worst case
    assert budgets.spent(f"tenant:t1:day:{TODAY}") == 0.25
    await budgets.reserve(estimate(0.75))  # 0.25 + 2 held + 0.75 fits exactly
    with pytest.raises(BudgetExceeded):
        await budgets.reserve(estimate(0.000001))


async def test_a_call_that_never_answered_gives_its_hold_back() -> None:
    budgets = Budgets(FakeClock(NOON), Limits(tenants={"t1": (1.0, 0.0)}))
    hold = await budgets.reserve(estimate(1.0))
    await budgets.settle(hold, None)
    await budgets.settle(hold, spend(1.0))  # settling twice changes nothing
    assert budgets.spent(f"tenant:t1:day:{TODAY}") == 0
    await budgets.reserve(estimate(1.0))


async def test_all_or_nothing_across_tenant_key_and_run() -> None:
    limits = Limits(tenants={"t1": (10.0, 10.0)}, keys={"k1": (2.0, 0.0)})
    budgets = Budgets(FakeClock(NOON), limits)
    await budgets.reserve(estimate(1.5, key_id="k1"))
    with pytest.raises(BudgetExceeded) as refused:
        await budgets.reserve(estimate(1.0, key_id="k1"))  # the key's day is the one full
    assert refused.value.budget == "key:k1:day"
    assert budgets.statistics().holds == 1  # the tenant's lines took nothing from the refused call
    await budgets.reserve(estimate(1.0, key_id="k2"))  # another key of the tenant is not held back
    with pytest.raises(BudgetExceeded) as run_refused:
        await budgets.reserve(estimate(1.0, run_id="r1", max_cost=0.5))
    assert run_refused.value.budget == "run:r1"


async def test_another_tenants_budget_is_untouched() -> None:
    budgets = Budgets(FakeClock(NOON), Limits(tenants={"t1": (1.0, 0.0), "t2": (1.0, 0.0)}))
    await budgets.reserve(estimate(1.0))
    with pytest.raises(BudgetExceeded):
        await budgets.reserve(estimate(1.0))
    await budgets.reserve(estimate(1.0, tenant_id="t2"))
    await budgets.reserve(estimate(100.0, tenant_id="t3"))  # no budget: no limit


async def test_the_day_renews_at_midnight_utc_and_the_month_does_not() -> None:
    clock = FakeClock(NOON)
    budgets = Budgets(clock, Limits(tenants={"t1": (1.0, 1.5)}))
    await budgets.settle(await budgets.reserve(estimate(1.0)), spend(1.0))
    with pytest.raises(BudgetExceeded) as refused:
        await budgets.reserve(estimate(0.5))
    assert refused.value.budget == "tenant:t1:day"
    assert refused.value.retry_after_s == DAY_S // 2  # spent, not held: only midnight frees it
    clock.advance(DAY_S / 2)  # 00:00 UTC, January 1st: a new day and a new month
    await budgets.settle(await budgets.reserve(estimate(1.0)), spend(1.0))
    clock.advance(DAY_S)
    with pytest.raises(BudgetExceeded) as month:
        await budgets.reserve(estimate(1.0))  # the day is new, January holds 1.0 of 1.5
    assert month.value.budget == "tenant:t1:month"


async def test_an_unpriced_call_is_refused_where_a_budget_applies_and_free_where_none_does() -> None:
    budgets = Budgets(FakeClock(NOON), Limits(tenants={"t1": (1.0, 0.0)}))
    with pytest.raises(BudgetExceeded) as refused:
        await budgets.reserve(estimate(None))
    assert refused.value.budget == "tenant:t1:day" and "no price" in refused.value.message
    free = await budgets.reserve(estimate(None, tenant_id="t2"))
    await budgets.settle(free, spend(None, tenant_id="t2"))
    assert budgets.statistics() == type(budgets.statistics())(holds=0, refused={("tenant", "unpriced"): 1}, waiting=0)


async def test_a_hold_nobody_settles_lapses_and_a_late_settle_still_counts() -> None:
    clock = FakeClock(NOON)
    budgets = Budgets(clock, Limits(tenants={"t1": (1.0, 0.0)}))
    lost = await budgets.reserve(estimate(1.0))
    clock.advance(CALL_HOLD_S)
    await budgets.settle(await budgets.reserve(estimate(0.5)), spend(0.5))
    await budgets.settle(lost, spend(0.5))  # the call did answer, after its hold lapsed
    assert budgets.spent(f"tenant:t1:day:{TODAY}") == 1.0
    with pytest.raises(BudgetExceeded):
        await budgets.reserve(estimate(0.1))


async def test_the_first_call_takes_over_its_admission_hold() -> None:
    clock = FakeClock(NOON)
    budgets = Budgets(clock, Limits(tenants={"t1": (2.0, 0.0)}))
    admitted = await budgets.hold_call(estimate(1.0))
    budgets.bind(admitted, "turn_1")
    call = await budgets.reserve(estimate(0.5, call_id="turn_1"))  # the admission's hold, not a second
    assert call.hold_id == admitted.hold_id and call.amount == to_micros(1.0)
    await budgets.reserve(estimate(1.0, call_id="turn_2"))  # 1 + 1 of 2: the first was not held twice
    await budgets.settle(call, spend(0.5))
    assert budgets.statistics().holds == 1


async def test_a_larger_call_tops_its_admission_hold_up_or_is_refused_and_gives_it_back() -> None:
    budgets = Budgets(FakeClock(NOON), Limits(tenants={"t1": (2.0, 0.0)}))
    admitted = await budgets.hold_call(estimate(0.5))
    budgets.bind(admitted, "turn_1")
    call = await budgets.reserve(estimate(1.5, call_id="turn_1"))
    assert call.amount == to_micros(1.5)
    await budgets.settle(call, None)
    admitted = await budgets.hold_call(estimate(0.5))
    budgets.bind(admitted, "run_1")
    with pytest.raises(BudgetExceeded):
        await budgets.reserve(estimate(2.5, run_id="run_1"))  # a run's steps find it by run_id
    assert budgets.statistics().holds == 0


async def test_an_admission_hold_never_taken_over_lapses_sooner() -> None:
    clock = FakeClock(NOON)
    budgets = Budgets(clock, Limits(tenants={"t1": (1.0, 0.0)}))
    budgets.bind(await budgets.hold_call(estimate(1.0)), "turn_1")
    with pytest.raises(BudgetExceeded):
        await budgets.hold_call(estimate(1.0))
    clock.advance(ADMISSION_HOLD_S)
    call = await budgets.reserve(estimate(0.5, call_id="turn_1"))  # its lapsed hold is held again
    assert call.amount == to_micros(1.0)
    with pytest.raises(BudgetExceeded):
        await budgets.hold_call(estimate(0.1))


async def test_a_burst_of_concurrent_reservations_never_holds_past_the_budget() -> None:
    budgets = Budgets(FakeClock(NOON), Limits(tenants={"t1": (10.0, 0.0)}))
    gate = asyncio.Event()

    async def one_call() -> bool:
        await gate.wait()
        try:
            hold = await budgets.reserve(estimate(0.1))
        except BudgetExceeded:
            return False
        await asyncio.sleep(0)  # let every other call reserve before this one settles
        await budgets.settle(hold, spend(0.1))
        return True

    tasks = [asyncio.create_task(one_call()) for _ in range(300)]
    gate.set()
    accepted = sum(await asyncio.gather(*tasks))
    assert accepted == 100
    assert budgets.spent(f"tenant:t1:day:{TODAY}") == pytest.approx(10.0)


async def test_an_agents_turn_hold_is_taken_over_by_its_runs_call_in_the_session() -> None:
    budgets = Budgets(FakeClock(NOON), Limits(tenants={"t1": (1.5, 0.0)}))
    admitted = await budgets.hold_call(estimate(1.0))
    budgets.bind(admitted, "turn_1", "ses_1")
    step = await budgets.reserve(estimate(1.0, run_id="run_9", call_id="run_9:1", session_id="ses_1"))
    assert step.hold_id == admitted.hold_id  # not held twice: 1.0 of 1.5
    await budgets.settle(step, spend(0.25))
    assert budgets.statistics().holds == 0
    other = await budgets.reserve(estimate(1.0, call_id="turn_1", session_id="ses_1"))
    assert other.hold_id != admitted.hold_id  # taken once: every id it was bound to is let go


async def test_admission_holds_no_call_took_over_are_let_go_once_lapsed() -> None:
    clock = FakeClock(NOON)
    budgets = Budgets(clock, Limits(tenants={"t1": (100.0, 0.0)}))
    for i in range(10):  # turns cancelled before their first call: nothing takes their holds over
        budgets.bind(await budgets.hold_call(estimate(1.0)), f"turn_{i}", f"ses_{i}")
    assert budgets.statistics().waiting == 20
    clock.advance(ADMISSION_HOLD_S)
    budgets.bind(await budgets.hold_call(estimate(1.0)), "turn_new")
    assert budgets.statistics().waiting == 1 and budgets.statistics().holds == 1
