"""Spending budgets: what a tenant, a key and a run may spend on model calls, held by reservation.

Theory of operation (docs/providers.md ("Budgets")):

- A model call counts against *lines*: the tenant's day and month (`TenantLimits.budget_per_day`
  / `budget_per_month`), its key's day and month (set on the key by an admin), and its run
  (`CallContext.max_cost`). A budget that is 0 (never set) is no line: no limit.
- Counting after the call overshoots (a burst passes the check before any of it is counted:
  LiteLLM's budgets do). So a call first *holds* its worst case (`Estimate.worst_cost`: every
  prompt byte a token, `max_tokens` of output) against all its lines at once, or against none:
  a line takes the hold when `spent + held + worst <= limit`, else `BudgetExceeded` names it.
  After the call, `settle` drops the hold and adds the real cost (`Spend.cost`), or only drops it
  (None: the call failed before answering). Concurrent calls can never spend past a line.
- Unpriced targets: a call whose worst case is unknown (its target has no price, or no
  `max_tokens`: the provider would decide its length) cannot be held by a currency budget,
  so it is refused when any line applies and passes freely when none does. Counting it as 0
  would let an unpriced model spend without limit for a tenant that an operator capped.
- Amounts are integers in millionths of the currency (`to_micros`, rounded up): exact, and
  atomic with the same arithmetic in Redis (`agentos.coordination.budgets`).
- A hold that nobody settles (its node died mid-call) lapses after `CALL_HOLD_S`; a settle that
  comes later still adds the cost.
- Admission (`hold_call`) holds the first call's worst case before a turn or run starts, so the
  402 comes before any stream; `bind(call_id, session_id)` names the turn (or run) it is for, and
  the first `reserve` of a call with that `call_id` (or `run_id`; or `session_id`: an agent's
  turn runs a run in its session, whose calls carry the run's ids) takes that hold over instead of holding
  again (topping it up if the call's worst case is larger). An admission hold never taken over
  lapses after `ADMISSION_HOLD_S`.

`Book` is the arithmetic, with `now` passed in; `Budgets` is the `Meter` of one process around
it. `ClusterBudgets` keeps the counters in Redis and overrides `_put` and `_settle` only.
"""

from __future__ import annotations

import calendar
import heapq
import math
import time
import uuid
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from agentos.clock import Clock
from agentos.errors import BudgetExceeded
from agentos.providers.base import CallContext
from agentos.providers.metering import Estimate, Spend
from agentos.store.base import Store
from agentos.store.ledger import GroupName, UsageQuery

MICROS = 1_000_000  # amounts are counted in millionths of the currency
DAY_S = 86_400
CALL_HOLD_S = 900.0  # past the longest model call (`total_timeout_s` is 600 by default)
ADMISSION_HOLD_S = 120.0  # from a turn's admission to its first model call (a permit wait included)
RUN_SEED_S = 30 * DAY_S  # how far back a restart looks for what runs spent (runs live no longer)


def to_micros(cost: float) -> int:
    """`cost` in millionths, rounded up (a hold or a spend is never counted short)."""
    return math.ceil(round(cost * MICROS, 3))


class BudgetLimits(Protocol):
    """Where the budgets are set: the tenant registry (`agentos.tenancy.registry`)."""

    def tenant_budgets(self, tenant_id: str) -> tuple[float, float]:
        """The tenant's (per day, per month) budgets; 0 each: none."""
        ...

    def key_budgets(self, key_id: str) -> tuple[float, float]:
        """The key's (per day, per month) budgets; 0 each: none."""
        ...


@dataclass(frozen=True, slots=True)
class Line:
    """One budget a call counts against: `budget` names it (in errors), `counter` is this
    period's count of it (`tenant:acme:day:20430`), `limit` in millionths, `ends_s` when the
    period ends (epoch seconds; 0: never, a run's)."""

    budget: str
    counter: str
    limit: int
    ends_s: int = 0


def budget_lines(context: CallContext, limits: BudgetLimits, now_s: float) -> list[Line]:
    """Every line a call of `context` counts against, at wall time `now_s`."""
    owners = [("tenant", context.tenant_id, limits.tenant_budgets(context.tenant_id))]
    if context.key_id:
        owners.append(("key", context.key_id, limits.key_budgets(context.key_id)))
    run = bool(context.run_id) and context.max_cost > 0
    if not run and all(amount <= 0 for _, _, budgets in owners for amount in budgets):
        return []  # the common case, before every model call: no calendar work
    lines: list[Line] = []
    for kind, owner, budgets in owners:
        for (period, label, _, ends_s), amount in zip(periods(now_s), budgets, strict=True):
            if amount > 0:
                name = f"{kind}:{owner}:{period}"
                lines.append(Line(name, f"{name}:{label}", to_micros(amount), ends_s))
    if run:
        lines.append(Line(f"run:{context.run_id}", f"run:{context.run_id}", to_micros(context.max_cost)))
    return lines


def periods(now_s: float) -> tuple[tuple[str, str, int, int], tuple[str, str, int, int]]:
    """The day and the month (UTC) of `now_s`: (period, its label in counters, starts, ends)."""
    day = int(now_s // DAY_S)
    year, month = time.gmtime(now_s)[:2]
    month_starts = calendar.timegm((year, month, 1, 0, 0, 0))
    month_ends = calendar.timegm((year + month // 12, month % 12 + 1, 1, 0, 0, 0))
    return ("day", str(day), day * DAY_S, (day + 1) * DAY_S), (
        "month",
        f"{year:04d}-{month:02d}",
        month_starts,
        month_ends,
    )


@dataclass(slots=True)
class Hold:
    """A `Reservation`: `amount` (millionths) held on each of `counters` under `hold_id`."""

    hold_id: str
    counters: tuple[str, ...]
    amount: int
    bound: tuple[str, ...] = ()  # the ids its admission bound it to (`Budgets.bind`)
    settled: bool = field(default=False, compare=False)


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a line could not take a hold: its numbers, in millionths."""

    line: Line
    spent: int
    held: int


class Book:
    """The counters of one process: spent and held per counter, and the holds by id. Sync."""

    def __init__(self) -> None:
        self._spent: dict[str, int] = {}
        self._held: dict[str, int] = {}
        self._holds: dict[str, dict[str, int]] = {}  # hold_id -> {counter: amount}
        self._expiry: list[tuple[float, str]] = []  # (lapses at, hold_id), a heap
        self._lapses: dict[str, float] = {}
        self._ends: dict[str, int] = {}  # counter -> when its period ends (0: never)

    def spent(self, counter: str) -> int:
        return self._spent.get(counter, 0)

    def seed(self, spent: Mapping[str, int], ends: Mapping[str, int]) -> None:
        """Start from what the ledger holds: millionths spent per counter (and when its period ends)."""
        self._spent.update(spent)
        self._ends.update(ends)

    def held(self, counter: str) -> int:
        return self._held.get(counter, 0)

    def holds(self) -> int:
        return len(self._holds)

    def put(self, hold_id: str, lines: Iterable[Line], amount: int, lapses_at: float, now: float) -> Refusal | None:
        """Hold `amount` on every line under `hold_id` (replacing what that id held), or on none.
        Returns the first line that cannot hold it, or None when held."""
        self._lapse(now)
        lines = list(lines)
        before = self._holds.get(hold_id, {})
        for line in lines:
            spent, held = self.spent(line.counter), self.held(line.counter) - before.get(line.counter, 0)
            if spent + held + amount > line.limit:
                return Refusal(line, spent, held)
        self._drop(hold_id)
        self._holds[hold_id] = {line.counter: amount for line in lines}
        for line in lines:
            self._held[line.counter] = self.held(line.counter) + amount
            self._ends[line.counter] = line.ends_s
        self._lapses[hold_id] = lapses_at
        heapq.heappush(self._expiry, (lapses_at, hold_id))
        return None

    def settle(self, hold_id: str, counters: Iterable[str], cost: int, now: float) -> None:
        """Drop the hold (if it has not lapsed) and add `cost` to each counter."""
        self._drop(hold_id)
        if cost > 0:
            for counter in counters:
                self._spent[counter] = self.spent(counter) + cost
        self._lapse(now)

    def _drop(self, hold_id: str) -> None:
        for counter, amount in self._holds.pop(hold_id, {}).items():
            left = self.held(counter) - amount
            if left > 0:
                self._held[counter] = left
            else:
                self._held.pop(counter, None)
        self._lapses.pop(hold_id, None)

    def _lapse(self, now: float) -> None:
        """Drop the holds past their time, and the counters of periods over (a day later)."""
        while self._expiry and self._expiry[0][0] <= now:
            lapses_at, hold_id = heapq.heappop(self._expiry)
            if self._lapses.get(hold_id) == lapses_at:  # not replaced or settled since
                self._drop(hold_id)
        over = [c for c, ends in self._ends.items() if ends and ends + DAY_S <= now and c not in self._held]
        for counter in over:
            del self._ends[counter]
            self._spent.pop(counter, None)


@dataclass(frozen=True, slots=True)
class BudgetStatistics:
    holds: int  # holds this process's counters keep (in-process only: with Redis, Redis keeps them)
    refused: dict[tuple[str, str], int]  # reservations refused since start, by (tenant|key|run, exceeded|unpriced)
    waiting: int = 0  # ids bound to admission holds that no call has taken over yet


class Budgets:
    """The `Meter` of one process (`agentos.providers.metering`). Usage::

    budgets = Budgets(WallClock(), registry)
    hold = await budgets.hold_call(estimate)          # at admission: 402 before any stream
    budgets.bind(hold, turn.turn_id)                  # the turn's calls take it over
    reservation = await budgets.reserve(estimate)     # the router, before each model call
    await budgets.settle(reservation, spend)          # after it (None: it never answered)

    `clock.now()` is wall time in epoch seconds: it decides the day and the month.
    """

    def __init__(
        self,
        clock: Clock,
        limits: BudgetLimits,
        *,
        call_hold_s: float = CALL_HOLD_S,
        admission_hold_s: float = ADMISSION_HOLD_S,
    ) -> None:
        self._clock = clock
        self._limits = limits
        self._call_hold_s = call_hold_s
        self._admission_hold_s = admission_hold_s
        self._book = Book()
        self._admitted: dict[str, Hold] = {}  # a bound id -> its admission hold, until a call takes it
        # (lapses at, bound id, hold) in the order bound: one TTL for all, so also in lapsing order.
        # A hold no call takes over (its turn cancelled first) is let go here once it has lapsed.
        self._bound: deque[tuple[float, str, Hold]] = deque()
        self._refused: dict[tuple[str, str], int] = {}

    def lines(self, context: CallContext) -> list[Line]:
        return budget_lines(context, self._limits, self._clock.now())

    async def hold_call(self, estimate: Estimate) -> Hold:
        """Hold the first call's worst case at admission, for `admission_hold_s`.

        Raises: BudgetExceeded naming the budget that cannot hold it."""
        return await self._hold("", estimate, self._admission_hold_s)

    def bind(self, hold: Hold, call_id: str, session_id: str = "") -> None:
        """The turn (or run) `call_id` of `session_id` was admitted with `hold`: the first call
        that carries either id takes it over."""
        now = self._clock.now()
        while self._bound and self._bound[0][0] <= now:
            _, bound, lapsed = self._bound.popleft()
            if self._admitted.get(bound) is lapsed:
                del self._admitted[bound]
        if hold.counters and not hold.settled:
            hold.bound = tuple(i for i in (call_id, session_id) if i)
            for bound in hold.bound:
                self._admitted[bound] = hold
                self._bound.append((now + self._admission_hold_s, bound, hold))

    async def reserve(self, estimate: Estimate) -> Hold:
        """Hold the call's worst case on every line it counts against (taking over the hold its
        admission made, if any).

        Raises: BudgetExceeded naming the budget that cannot hold it."""
        admitted = self._take_admitted(estimate.context)
        if admitted is None:
            return await self._hold("", estimate, self._call_hold_s)
        try:
            return await self._hold(admitted.hold_id, estimate, self._call_hold_s, admitted.amount)
        except BudgetExceeded:
            await self.settle(admitted, None)
            raise

    async def settle(self, reservation: object, spend: Spend | None) -> None:
        """Replace the hold by what the call cost, or give it back (None). Once per hold."""
        assert isinstance(reservation, Hold)
        if reservation.settled:
            return
        reservation.settled = True
        self._unbind(reservation)
        if reservation.counters:
            cost = 0 if spend is None or spend.cost is None else to_micros(spend.cost)
            await self._settle(reservation.hold_id, reservation.counters, cost)

    async def release(self, hold: Hold) -> None:
        """Give an admission hold back (the start it was for failed)."""
        await self.settle(hold, None)

    def statistics(self) -> BudgetStatistics:
        return BudgetStatistics(self._book.holds(), dict(self._refused), len(self._admitted))

    async def seed(self, store: Store) -> None:
        """Start today's and this month's counters (and recent runs') from the usage ledger, so a
        restart does not forget what was spent. Raises: StoreError."""
        spent, ends = await spent_in_ledger(store, self._clock.now())
        await self._seed(spent, ends)

    async def _seed(self, spent: dict[str, int], ends: dict[str, int]) -> None:
        self._book.seed(spent, ends)

    def spent(self, counter: str) -> float:
        """What `counter` (`Line.counter`) has spent so far, in the currency (this process's view)."""
        return self._book.spent(counter) / MICROS

    def idle(self, context: CallContext) -> bool:
        """`Meter.idle`: no budget line for `context`, and no admission hold bound to its ids."""
        if self._admitted and any(
            i and i in self._admitted for i in (context.call_id, context.run_id, context.session_id)
        ):
            return False
        return not self.lines(context)

    def _take_admitted(self, context: CallContext | None) -> Hold | None:
        if context is None:
            return None
        for bound in (context.call_id, context.run_id, context.session_id):
            if bound and (hold := self._admitted.get(bound)) is not None:
                self._unbind(hold)
                return hold
        return None

    def _unbind(self, hold: Hold) -> None:
        for bound in hold.bound:
            if self._admitted.get(bound) is hold:
                del self._admitted[bound]

    async def _hold(self, hold_id: str, estimate: Estimate, hold_s: float, at_least: int = 0) -> Hold:
        """Hold under `hold_id` (empty: a new one)."""
        context = estimate.context or CallContext()
        lines = self.lines(context)
        if not lines:
            return Hold(hold_id, (), 0)
        hold_id = hold_id or uuid.uuid4().hex
        if estimate.worst_cost is None or estimate.max_tokens <= 0:  # no bound on what it may cost
            self._count_refusal(lines[0], "unpriced")
            raise _unpriced(lines[0], estimate)
        amount = max(at_least, to_micros(estimate.worst_cost))
        refusal = await self._put(hold_id, lines, amount, hold_s)
        if refusal is not None:
            self._count_refusal(refusal.line, "exceeded")
            raise _exceeded(refusal, amount, self._clock.now())
        return Hold(hold_id, tuple(line.counter for line in lines), amount)

    def _count_refusal(self, line: Line, why: str) -> None:
        kind = (line.budget.split(":", 1)[0], why)
        self._refused[kind] = self._refused.get(kind, 0) + 1

    async def _put(self, hold_id: str, lines: list[Line], amount: int, hold_s: float) -> Refusal | None:
        now = self._clock.now()
        return self._book.put(hold_id, lines, amount, now + hold_s, now)

    async def _settle(self, hold_id: str, counters: tuple[str, ...], cost: int) -> None:
        self._book.settle(hold_id, counters, cost, self._clock.now())


async def spent_in_ledger(store: Store, now_s: float) -> tuple[dict[str, int], dict[str, int]]:
    """Millionths spent per counter by the ledger's rows: the tenants' and keys' this day and
    month, the runs' over `RUN_SEED_S`; and when each counter's period ends. Grouped by target
    too: a target without a price sums to None and adds nothing, the priced ones are kept."""
    now_ms = int(now_s * 1000) + 1
    spent: dict[str, int] = {}
    ends: dict[str, int] = {}
    for period, label, starts_s, ends_s in periods(now_s):
        for kind in ("tenant", "key"):
            for owner, cost in await _costs(store, kind, starts_s * 1000, now_ms):
                counter = f"{kind}:{owner}:{period}:{label}"
                spent[counter] = spent.get(counter, 0) + cost
                ends[counter] = ends_s
    for owner, cost in await _costs(store, "run", now_ms - RUN_SEED_S * 1000, now_ms):
        spent[f"run:{owner}"] = spent.get(f"run:{owner}", 0) + cost
    return spent, ends


async def _costs(store: Store, group: GroupName, from_ms: int, to_ms: int) -> list[tuple[str, int]]:
    query = UsageQuery(tenant_id=None, group_by=(group, "target"), from_ms=from_ms, to_ms=to_ms, limit=10**7)
    totals = await store.usage_totals(query)
    return [(owner, to_micros(t.cost)) for t in totals if (owner := getattr(t, group)) and t.cost]


def _money(micros: int) -> str:
    return f"{micros / MICROS:.6f}".rstrip("0").rstrip(".")


def _exceeded(refusal: Refusal, amount: int, now_s: float) -> BudgetExceeded:
    line = refusal.line
    # Only the end of its period frees what is spent; holds in flight may free sooner (no hint then).
    renews = refusal.spent + amount > line.limit and line.ends_s > 0
    return BudgetExceeded(
        f"budget {line.budget!r} ({_money(line.limit)}) cannot hold this call's worst case ({_money(amount)}):"
        f" {_money(refusal.spent)} spent, {_money(refusal.held)} held by calls in flight",
        budget=line.budget,
        retry_after_s=max(1, math.ceil(line.ends_s - now_s)) if renews else None,
    )


def _unpriced(line: Line, estimate: Estimate) -> BudgetExceeded:
    return BudgetExceeded(
        f"budget {line.budget!r} cannot hold a call to {estimate.target or estimate.model!r}: its worst case is"
        " unknown (the target has no price, or no max_tokens), and a budgeted call must have one",
        budget=line.budget,
    )
