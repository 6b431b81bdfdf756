"""Hypothesis drives three tenants' turns and streams through one shared permit pool.

The machine plays the runtime and keeps its own model of who holds and who waits, per tenant.
After every step it checks the pool against the model and against the fair-share rules:

- counts: held and waiting, per tenant and in all, match the model;
- work conservation under the caps: a free permit never idles while a tenant below its cap waits;
- the reserve: once the server is shared, no grant takes a tenant past its cap;
- fairness: a permit freed by a release goes to a waiting tenant with the lowest held/weight;
- order: each tenant's waiters are granted first come, first served;
- the end: whatever the path (cancel, supersede, delete, expiry, end), ending every turn brings
  every count back to zero.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from agentos.kernel import (
    AcceptTurn,
    CancelRequested,
    CancelTurn,
    Command,
    Event,
    FailTurn,
    GrantPermit,
    Kernel,
    KernelLimits,
    ProviderReleased,
    RejectTurn,
    SessionClosed,
    StreamRequested,
    TenantConfigured,
    Tick,
    TurnEnded,
    TurnSubmitted,
)

LIMITS = KernelLimits(concurrency_limit=4, permit_wait_timeout_s=20, session_ttl_s=50, fair_reserve=0.25)
TENANTS = ["A", "B", "C"]
WEIGHTS = {"A": 1, "B": 2, "C": 3}  # once configured; 1 before
SESSIONS = st.sampled_from([f"{t}{i}" for t in TENANTS for i in range(3)])  # a session's tenant: its letter


class FairShareMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.kernel = Kernel(LIMITS)
        self.now = 0.0
        self.next_id = 0
        self.tenant: dict[str, str] = {}  # turn or stream -> its tenant
        self.live: set[str] = set()
        self.holding: set[str] = set()
        self.lines: dict[str, list[str]] = {t: [] for t in TENANTS}  # the model's waiters, in order
        self.caps: dict[str, int] = {t: 0 for t in TENANTS}
        self.weights: dict[str, int] = {t: 1 for t in TENANTS}

    # -- the runtime ---------------------------------------------------------------------------

    def held(self, tenant: str) -> int:
        return sum(1 for h in self.holding if self.tenant[h] == tenant)

    def handle(self, event: Event, releasing: str | None = None) -> None:
        cap = self.kernel.statistics().tenant_permit_cap
        held_before = {t: self.held(t) - (releasing is not None and self.tenant[releasing] == t) for t in TENANTS}
        waiting_before = {t: bool(line) for t, line in self.lines.items()}
        commands = self.kernel.handle(event, self.now)
        grants = [c.turn_id for c in commands if isinstance(c, GrantPermit)]
        if releasing is not None:
            assert len(grants) <= 1, "one release freed more than one permit"
            for grant in grants:
                self.check_fair_choice(grant, held_before, waiting_before, cap)
        if releasing is not None:
            self.holding.discard(releasing)
        self.apply(commands)
        cap_now = self.kernel.statistics().tenant_permit_cap
        assert all(self.held(self.tenant[g]) <= cap_now for g in grants), "a grant went past the reserve"

    def check_fair_choice(self, grant: str, held: dict[str, int], waiting: dict[str, bool], cap: int) -> None:
        eligible = [t for t in TENANTS if waiting[t] and held[t] < cap]
        chosen = self.tenant[grant]
        assert chosen in eligible, f"{chosen} was granted past its cap or without waiting"
        w = self.weights
        assert all(held[chosen] / w[chosen] <= held[t] / w[t] for t in eligible), (held, w, chosen)

    def apply(self, commands: list[Command]) -> None:
        for c in commands:
            match c:
                case AcceptTurn(t):
                    self.live.add(t)
                    self.lines[self.tenant[t]].append(t)  # until its grant, below
                case GrantPermit(t):
                    line = self.lines[self.tenant[t]]
                    assert line and line[0] == t, f"{t} jumped its tenant's line {line}"
                    line.pop(0)
                    self.holding.add(t)
                case CancelTurn(t, _) | FailTurn(t, _):
                    self.leave_line(t)
                case RejectTurn(t, code=code):
                    assert code == "overloaded" or self.caps[self.tenant[t]], "a tenant without a cap was capped"

    def leave_line(self, turn: str) -> None:
        line = self.lines[self.tenant[turn]]
        if turn in line:
            line.remove(turn)

    def new_id(self, tenant: str) -> str:
        self.next_id += 1
        turn = f"{tenant.lower()}{self.next_id}"
        self.tenant[turn] = tenant
        return turn

    # -- rules ---------------------------------------------------------------------------------

    @rule(session=SESSIONS)
    def submit(self, session: str) -> None:
        tenant = session[0]
        turn = self.new_id(tenant)
        self.handle(TurnSubmitted(session, turn, tenant_id=tenant))
        if turn in self.live and self.caps[tenant]:  # admitted: within its cap (lowering one evicts nothing)
            assert self.kernel.tenant_usage(tenant).turns_in_flight <= self.caps[tenant]

    @rule(tenant=st.sampled_from(TENANTS))
    def request_stream(self, tenant: str) -> None:
        stream = self.new_id(tenant)
        self.live.add(stream)
        self.lines[tenant].append(stream)  # until its grant
        self.handle(StreamRequested(stream, tenant_id=tenant))

    @rule(tenant=st.sampled_from(TENANTS), cap=st.integers(0, 2))
    def configure(self, tenant: str, cap: int) -> None:
        self.caps[tenant] = cap
        self.weights[tenant] = WEIGHTS[tenant]
        self.handle(TenantConfigured(tenant, weight=WEIGHTS[tenant], max_concurrent_turns=cap))

    @rule(session=SESSIONS)
    def cancel(self, session: str) -> None:
        self.handle(CancelRequested(session))

    @rule(session=SESSIONS)
    def delete(self, session: str) -> None:
        self.handle(SessionClosed(session))

    @precondition(lambda self: self.holding)
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        turn = data.draw(st.sampled_from(sorted(self.holding)))
        self.handle(ProviderReleased(turn), releasing=turn)
        self.holding.discard(turn)

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def end(self, data: st.DataObject) -> None:
        self.end_turn(data.draw(st.sampled_from(sorted(self.live))))

    def end_turn(self, turn: str) -> None:
        self.handle(TurnEnded(turn), releasing=turn if turn in self.holding else None)
        self.holding.discard(turn)
        self.live.discard(turn)
        self.leave_line(turn)

    @rule(dt=st.floats(min_value=0, max_value=25))
    def advance(self, dt: float) -> None:
        self.now += dt
        self.handle(Tick())

    # -- invariants ----------------------------------------------------------------------------

    @invariant()
    def counts_match_the_model(self) -> None:
        stats = self.kernel.statistics()
        assert stats.permits_in_use == len(self.holding) <= LIMITS.concurrency_limit
        assert stats.waiting_for_permit == sum(map(len, self.lines.values()))
        for t in TENANTS:
            usage = self.kernel.tenant_usage(t)
            assert (usage.permits_held, usage.waiting_for_permit) == (self.held(t), len(self.lines[t]))

    @invariant()
    def no_free_permit_idles_while_a_tenant_below_its_cap_waits(self) -> None:
        stats = self.kernel.statistics()
        if stats.permits_in_use < LIMITS.concurrency_limit:
            assert all(self.held(t) >= stats.tenant_permit_cap for t in TENANTS if self.lines[t])

    def teardown(self) -> None:
        for turn in sorted(self.live):
            self.end_turn(turn)
        stats = self.kernel.statistics()
        assert (stats.permits_in_use, stats.waiting_for_permit, stats.in_flight_turns, stats.live_turns) == (0,) * 4
        for t in TENANTS:
            usage = self.kernel.tenant_usage(t)
            assert (usage.permits_held, usage.waiting_for_permit, usage.turns_in_flight) == (0, 0, 0)


TestFairShareMachine = FairShareMachine.TestCase
TestFairShareMachine.settings = settings(max_examples=200, stateful_step_count=60, deadline=None)
