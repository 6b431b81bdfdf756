"""Hypothesis drives the kernel through random turns (every `on_busy` strategy), cancels,
steer claims, releases, ends and expiries."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from agentos.kernel import (
    ON_BUSY,
    AcceptTurn,
    CancelRequested,
    CancelTurn,
    Command,
    DeliverSteer,
    EvictSession,
    FailTurn,
    GrantPermit,
    Kernel,
    KernelLimits,
    OnBusy,
    ProviderReleased,
    QueueTurn,
    RejectTurn,
    SessionClosed,
    SteerClaimed,
    SteerTurn,
    StreamRequested,
    Tick,
    TurnCancelRequested,
    TurnEnded,
    TurnSubmitted,
)

SESSIONS = st.sampled_from(["s0", "s1", "s2", "s3", "s4"])
MAX_QUEUED = 2


class KernelMachine(RuleBasedStateMachine):
    """A model of the runtime: it carries out every command the way the real driver does."""

    def __init__(self) -> None:
        super().__init__()
        self.limits = KernelLimits(
            max_in_flight_turns=3,
            concurrency_limit=2,
            session_ttl_s=50,
            permit_wait_timeout_s=20,
            max_queued_turns_per_session=MAX_QUEUED,
        )
        self.kernel = Kernel(self.limits)
        self.now = 0.0
        self.next_id = 0
        self.live: set[str] = set()  # turns whose task runs
        self.streaming: set[str] = set()  # turns holding a permit
        self.terminal: dict[str, int] = {}  # turn -> terminal commands seen (cancel/fail)
        self.rejected: set[str] = set()
        self.granted: set[str] = set()
        self.no_permit: set[str] = set()  # agent turns (wants_permit=False)
        self.latest: dict[str, str] = {}  # session -> its last admitted turn
        self.session_of: dict[str, str] = {}
        self.queued: set[str] = set()  # turns waiting in their session's queue
        self.accepted: set[str] = set()  # turns that ever got AcceptTurn
        self.steers: dict[str, str] = {}  # steer turn -> the agent turn it was offered to
        self.delivered: dict[str, int] = {}  # steer turn -> times delivered

    def apply(self, commands: list[Command]) -> None:
        for c in commands:
            match c:
                case AcceptTurn(t):
                    assert t not in self.delivered, "a steered message was delivered and also ran as a turn"
                    self.live.add(t)
                    self.queued.discard(t)
                    self.accepted.add(t)
                    if t in self.session_of:
                        self.latest[self.session_of[t]] = t
                case QueueTurn(t, _):
                    self.live.add(t)
                    self.queued.add(t)
                case SteerTurn(t, into):
                    assert t in self.queued and into in self.no_permit, "only an agent turn is steered"
                    self.steers[t] = into
                case DeliverSteer(t, into):
                    assert t not in self.accepted, "a promoted turn was delivered as a steer too"
                    assert self.kernel.active_turn(self.session_of[t]) == into
                    self.delivered[t] = self.delivered.get(t, 0) + 1
                    self.live.discard(t)  # the kernel forgot it: delivered
                    self.queued.discard(t)
                case GrantPermit(t):
                    assert t not in self.rejected, "a rejected turn started the provider"
                    assert t not in self.no_permit, "a permit went to a turn that never uses one"
                    assert t in self.live
                    self.streaming.add(t)
                    self.granted.add(t)
                case CancelTurn(t, _, _) | FailTurn(t, _):
                    self.terminal[t] = self.terminal.get(t, 0) + 1
                    self.queued.discard(t)
                case RejectTurn(t, _):
                    self.rejected.add(t)
                case EvictSession(s):
                    assert self.kernel.active_turn(s) is None

    @rule(session=SESSIONS, wants_permit=st.booleans(), on_busy=st.sampled_from(ON_BUSY))
    def submit(self, session: str, wants_permit: bool, on_busy: OnBusy) -> None:
        self.next_id += 1
        turn = f"t{self.next_id}"
        self.session_of[turn] = session
        if not wants_permit:
            self.no_permit.add(turn)
        event = TurnSubmitted(session, turn, wants_permit, on_busy=on_busy)
        self.apply(self.kernel.handle(event, self.now))

    @precondition(lambda self: self.steers)
    @rule(data=st.data(), right_turn=st.booleans())
    def claim_steer(self, data: st.DataObject, right_turn: bool) -> None:
        """The agent turn reaches its next step (or another turn claims by mistake)."""
        steer = data.draw(st.sampled_from(sorted(self.steers)))
        into = self.steers[steer] if right_turn else data.draw(st.sampled_from(sorted(self.accepted | {"x"})))
        self.apply(self.kernel.handle(SteerClaimed(steer, into), self.now))

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def cancel_by_id(self, data: st.DataObject) -> None:
        turn = data.draw(st.sampled_from(sorted(self.live)))
        self.apply(self.kernel.handle(TurnCancelRequested(turn), self.now))

    @rule()
    def request_stream(self) -> None:
        """An agent run's model call: it queues for a permit beside the turns."""
        self.next_id += 1
        stream = f"r{self.next_id}"
        self.live.add(stream)
        self.apply(self.kernel.handle(StreamRequested(stream), self.now))

    @rule(session=SESSIONS)
    def cancel(self, session: str) -> None:
        self.apply(self.kernel.handle(CancelRequested(session), self.now))

    @rule(session=SESSIONS)
    def delete(self, session: str) -> None:
        self.apply(self.kernel.handle(SessionClosed(session), self.now))

    @precondition(lambda self: self.streaming)
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        turn = data.draw(st.sampled_from(sorted(self.streaming)))
        self.streaming.discard(turn)
        self.apply(self.kernel.handle(ProviderReleased(turn), self.now))

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def end(self, data: st.DataObject) -> None:
        turn = data.draw(st.sampled_from(sorted(self.live)))
        self.live.discard(turn)
        self.streaming.discard(turn)
        self.queued.discard(turn)  # a queued turn whose client left
        self.apply(self.kernel.handle(TurnEnded(turn), self.now))

    @rule(dt=st.floats(min_value=0, max_value=30))
    def advance(self, dt: float) -> None:
        self.now += dt
        self.apply(self.kernel.handle(Tick(), self.now))

    @precondition(lambda self: self.kernel.next_deadline() is not None)
    @rule()
    def jump_to_deadline(self) -> None:
        deadline = self.kernel.next_deadline()
        assert deadline is not None
        self.now = max(self.now, deadline)
        self.apply(self.kernel.handle(Tick(), self.now))

    @invariant()
    def within_limits(self) -> None:
        stats = self.kernel.statistics()
        assert stats.in_flight_turns <= self.limits.max_in_flight_turns
        assert stats.permits_in_use <= self.limits.concurrency_limit
        assert stats.permits_in_use == len(self.streaming), "a permit leaked or was double-counted"
        assert stats.live_turns == len(self.live)

    @invariant()
    def at_most_one_terminal_command_per_turn(self) -> None:
        assert all(n == 1 for n in self.terminal.values())

    @invariant()
    def no_two_turns_of_a_session_run_at_once(self) -> None:
        running: dict[str, int] = {}
        for turn in self.accepted & self.live:
            if turn in self.session_of and turn not in self.terminal:
                running[self.session_of[turn]] = running.get(self.session_of[turn], 0) + 1
        assert all(n == 1 for n in running.values()), running

    @invariant()
    def queues_stay_within_their_bound_and_behind_an_active_turn(self) -> None:
        per_session: dict[str, int] = {}
        for turn in self.queued:
            per_session[self.session_of[turn]] = per_session.get(self.session_of[turn], 0) + 1
        assert all(n <= MAX_QUEUED for n in per_session.values())
        assert all(self.kernel.active_turn(session) is not None for session in per_session)
        assert self.kernel.statistics().queued_turns == len(self.queued)

    @invariant()
    def a_steered_message_is_delivered_at_most_once_and_never_also_run(self) -> None:
        assert all(n == 1 for n in self.delivered.values())
        assert not (set(self.delivered) & self.accepted)

    @invariant()
    def the_last_admitted_turn_of_a_session_is_its_active_one(self) -> None:
        """Last-wins: a session's active turn is its newest admitted turn while that one is
        neither over nor cancelled or failed; an older turn ending never clears it."""
        for session in ["s0", "s1", "s2", "s3", "s4"]:
            latest = self.latest.get(session)
            expected = latest if latest in self.live and latest not in self.terminal else None
            assert self.kernel.active_turn(session) == expected

    def teardown(self) -> None:
        """Every path releases its slot: end everything, and the kernel is back to zero."""
        while self.live:  # ending active turns promotes queued ones: end those too
            for turn in sorted(self.live):
                self.live.discard(turn)
                self.apply(self.kernel.handle(TurnEnded(turn), self.now))
        stats = self.kernel.statistics()
        assert (stats.in_flight_turns, stats.permits_in_use, stats.live_turns) == (0, 0, 0)
        assert stats.queued_turns == 0


TestKernelMachine = KernelMachine.TestCase
TestKernelMachine.settings = settings(max_examples=150, stateful_step_count=60, deadline=None)
