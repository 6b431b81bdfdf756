"""Hypothesis drives the kernel through random turns, cancels, releases, ends and expiries."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from agentos.kernel import (
    AcceptTurn,
    CancelRequested,
    CancelTurn,
    Command,
    EvictSession,
    FailTurn,
    GrantPermit,
    Kernel,
    KernelLimits,
    ProviderReleased,
    RejectTurn,
    SessionClosed,
    StreamRequested,
    Tick,
    TurnEnded,
    TurnSubmitted,
)

SESSIONS = st.sampled_from(["s0", "s1", "s2", "s3", "s4"])


class KernelMachine(RuleBasedStateMachine):
    """A model of the runtime: it carries out every command the way the real driver does."""

    def __init__(self) -> None:
        super().__init__()
        self.limits = KernelLimits(
            max_in_flight_turns=3, concurrency_limit=2, session_ttl_s=50, permit_wait_timeout_s=20
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

    def apply(self, commands: list[Command]) -> None:
        for c in commands:
            match c:
                case AcceptTurn(t):
                    self.live.add(t)
                    if t in self.session_of:
                        self.latest[self.session_of[t]] = t
                case GrantPermit(t):
                    assert t not in self.rejected, "a rejected turn started the provider"
                    assert t not in self.no_permit, "a permit went to a turn that never uses one"
                    assert t in self.live
                    self.streaming.add(t)
                    self.granted.add(t)
                case CancelTurn(t, _) | FailTurn(t, _):
                    self.terminal[t] = self.terminal.get(t, 0) + 1
                case RejectTurn(t, _):
                    self.rejected.add(t)
                case EvictSession(s):
                    assert self.kernel.active_turn(s) is None

    @rule(session=SESSIONS, wants_permit=st.booleans())
    def submit(self, session: str, wants_permit: bool) -> None:
        self.next_id += 1
        turn = f"t{self.next_id}"
        self.session_of[turn] = session
        if not wants_permit:
            self.no_permit.add(turn)
        self.apply(self.kernel.handle(TurnSubmitted(session, turn, wants_permit), self.now))

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
    def the_last_admitted_turn_of_a_session_is_its_active_one(self) -> None:
        """Last-wins: a session's active turn is its newest admitted turn while that one is
        neither over nor cancelled or failed; an older turn ending never clears it."""
        for session in ["s0", "s1", "s2", "s3", "s4"]:
            latest = self.latest.get(session)
            expected = latest if latest in self.live and latest not in self.terminal else None
            assert self.kernel.active_turn(session) == expected

    def teardown(self) -> None:
        """Every path releases its slot: end everything, and the kernel is back to zero."""
        for turn in sorted(self.live):
            self.apply(self.kernel.handle(TurnEnded(turn), self.now))
        stats = self.kernel.statistics()
        assert (stats.in_flight_turns, stats.permits_in_use, stats.live_turns) == (0, 0, 0)


TestKernelMachine = KernelMachine.TestCase
TestKernelMachine.settings = settings(max_examples=150, stateful_step_count=60, deadline=None)
