"""The kernel: admission, last-wins, provider permits and session TTL, as plain logic.

Theory of operation
-------------------
`Kernel.handle(event, now)` is the only entry point. It updates the state and returns the
commands the runtime must carry out; it never waits, never reads a clock and does no I/O, so
the runtime calls it from the event loop without a lock and tests drive it with plain floats.

A turn moves through these states:

    submitted --(over the admission limit)--> rejected            [RejectTurn]
    (a StreamRequested, an agent run's model call, skips admission and queues for a permit)
    submitted --> waiting --(permit free)--> streaming             [AcceptTurn, GrantPermit]
    waiting   --(permit wait deadline)--> ended                    [FailTurn("provider_limit_timeout")]
    waiting | streaming --(cancel, or a newer turn in its session)--> cancelling  [CancelTurn]
    any live state --(TurnEnded)--> gone

Counting rules:
- `in_flight` counts each session's *active* turn. A turn leaves the count the moment it is
  cancelled or fails, so a superseding turn never pushes the count over the limit.
- A turn holds a provider permit from `GrantPermit` until `ProviderReleased` (or `TurnEnded`),
  cancelling turns included: the upstream is busy until it is really closed.
- A session idle (no active turn) for `session_ttl_s` is evicted; activity moves it to the
  back of an insertion-ordered dict, so expiry scans only the expired front.
- Over the limit every new turn is rejected before anything changes, one meant to replace its
  own session's running turn included: replacing costs a new upstream request, and that is the
  work the gate exists to refuse. The running turn goes on unharmed.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass
from enum import Enum

from agentos.kernel.commands import (
    AcceptTurn,
    CancelTurn,
    Command,
    EvictSession,
    FailTurn,
    GrantPermit,
    RejectTurn,
)
from agentos.kernel.events import (
    CancelRequested,
    Event,
    ProviderReleased,
    SessionClosed,
    SessionOpened,
    StreamRequested,
    Tick,
    TurnEnded,
    TurnSubmitted,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class KernelLimits:
    max_in_flight_turns: int = 0  # 0 = no admission gate
    concurrency_limit: int = 64
    session_ttl_s: float = 300.0
    permit_wait_timeout_s: float = 30.0
    retry_after_s: int = 1

    def __post_init__(self) -> None:
        assert self.max_in_flight_turns >= 0
        assert self.concurrency_limit >= 1
        assert self.session_ttl_s > 0 and self.permit_wait_timeout_s > 0


@dataclass(frozen=True, slots=True)
class KernelStatistics:
    in_flight_turns: int
    admission_limit: int
    active_sessions: int
    live_turns: int
    permits_in_use: int
    waiting_for_permit: int
    admitted_total: int
    rejected_total: int
    cancelled_total: int
    permit_timeouts_total: int
    evicted_total: int


class TurnState(Enum):
    WAITING = "waiting"
    STREAMING = "streaming"
    CANCELLING = "cancelling"
    FAILED = "failed"


class _Turn:
    __slots__ = ("session_id", "state", "holds_permit", "counted")

    def __init__(self, session_id: str | None) -> None:
        self.session_id = session_id  # None: a stream outside any session (StreamRequested)
        self.state = TurnState.WAITING
        self.holds_permit = False
        self.counted = True


class _Session:
    __slots__ = ("active_turn", "last_active_s")

    def __init__(self, now: float) -> None:
        self.active_turn: str | None = None
        self.last_active_s = now


class Kernel:
    def __init__(self, limits: KernelLimits) -> None:
        self.limits = limits
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        self._turns: dict[str, _Turn] = {}
        self._waiters: deque[tuple[float, str]] = deque()
        self._in_flight = 0
        self._permits = 0
        self._admitted = self._rejected = self._cancelled = self._timeouts = self._evicted = 0

    # -- queries ---------------------------------------------------------------------------

    def has_session(self, session_id: str) -> bool:
        return session_id in self._sessions

    def active_turn(self, session_id: str) -> str | None:
        session = self._sessions.get(session_id)
        return session.active_turn if session else None

    def turn_state(self, turn_id: str) -> TurnState | None:
        turn = self._turns.get(turn_id)
        return turn.state if turn else None

    def next_deadline(self) -> float | None:
        """The earliest time at which a `Tick` would do something, or None."""
        deadlines = []
        if self._waiters:
            deadlines.append(self._waiters[0][0])
        for session in self._sessions.values():
            deadlines.append(session.last_active_s + self.limits.session_ttl_s)
            break
        return min(deadlines) if deadlines else None

    def statistics(self) -> KernelStatistics:
        return KernelStatistics(
            in_flight_turns=self._in_flight,
            admission_limit=self.limits.max_in_flight_turns,
            active_sessions=len(self._sessions),
            live_turns=len(self._turns),
            permits_in_use=self._permits,
            waiting_for_permit=sum(1 for t in self._turns.values() if t.state is TurnState.WAITING),
            admitted_total=self._admitted,
            rejected_total=self._rejected,
            cancelled_total=self._cancelled,
            permit_timeouts_total=self._timeouts,
            evicted_total=self._evicted,
        )

    # -- the one entry point -------------------------------------------------------------------

    def handle(self, event: Event, now: float) -> list[Command]:
        match event:
            case TurnSubmitted(session_id, turn_id, wants_permit):
                return self._submit(session_id, turn_id, now, wants_permit)
            case StreamRequested(stream_id, _):
                return self._request_stream(stream_id, now)
            case ProviderReleased(turn_id):
                return self._release(turn_id, now)
            case TurnEnded(turn_id):
                return self._end(turn_id, now)
            case CancelRequested(session_id, reason):
                return self._cancel_session_turn(session_id, reason)
            case SessionOpened(session_id):
                self._touch(session_id, now)
                return []
            case SessionClosed(session_id):
                commands = self._cancel_session_turn(session_id, "session_deleted")
                self._sessions.pop(session_id, None)
                return commands
            case Tick():
                return self._expire_waiters(now) + self._expire_sessions(now)
        raise AssertionError(f"unknown event {event!r}")  # pragma: no cover

    # -- transitions -----------------------------------------------------------------------------

    def _submit(self, session_id: str, turn_id: str, now: float, wants_permit: bool) -> list[Command]:
        assert turn_id not in self._turns, f"turn {turn_id!r} submitted twice"
        limit = self.limits.max_in_flight_turns
        if limit and self._in_flight >= limit:
            self._rejected += 1
            return [RejectTurn(turn_id, self.limits.retry_after_s)]
        session = self._touch(session_id, now)
        commands: list[Command] = []
        if session.active_turn is not None:
            commands += self._cancel(session.active_turn, "superseded")
        self._turns[turn_id] = _Turn(session_id)
        session.active_turn = turn_id
        self._in_flight += 1
        self._admitted += 1
        commands.append(AcceptTurn(turn_id))
        if not wants_permit:
            self._turns[turn_id].state = TurnState.STREAMING  # its run's model calls queue instead
            return commands
        return commands + self._queue_for_permit(turn_id, now)

    def _request_stream(self, stream_id: str, now: float) -> list[Command]:
        assert stream_id not in self._turns, f"stream {stream_id!r} requested twice"
        stream = self._turns[stream_id] = _Turn(None)
        stream.counted = False  # not a session's turn: the admission gate does not count it
        return self._queue_for_permit(stream_id, now)

    def _queue_for_permit(self, turn_id: str, now: float) -> list[Command]:
        if self._permits < self.limits.concurrency_limit and not self._waiters:
            return [self._grant(turn_id)]
        self._waiters.append((now + self.limits.permit_wait_timeout_s, turn_id))
        return []

    def _grant(self, turn_id: str) -> GrantPermit:
        turn = self._turns[turn_id]
        turn.state = TurnState.STREAMING
        turn.holds_permit = True
        self._permits += 1
        return GrantPermit(turn_id)

    def _release(self, turn_id: str, now: float) -> list[Command]:
        turn = self._turns.get(turn_id)
        if turn is None or not turn.holds_permit:
            return []
        turn.holds_permit = False
        self._permits -= 1
        return self._grant_waiters(now)

    def _grant_waiters(self, now: float) -> list[Command]:
        commands: list[Command] = []
        while self._waiters and self._permits < self.limits.concurrency_limit:
            _, turn_id = self._waiters.popleft()
            turn = self._turns.get(turn_id)
            if turn is not None and turn.state is TurnState.WAITING:
                commands.append(self._grant(turn_id))
        return commands

    def _end(self, turn_id: str, now: float) -> list[Command]:
        turn = self._turns.get(turn_id)
        if turn is None:
            return []
        commands = self._release(turn_id, now)
        self._uncount(turn_id, turn)
        del self._turns[turn_id]
        if turn.session_id is not None and turn.session_id in self._sessions:
            self._touch(turn.session_id, now)
        return commands

    def _uncount(self, turn_id: str, turn: _Turn) -> None:
        """Take the turn out of `in_flight` and out of its session's active slot."""
        if turn.counted:
            turn.counted = False
            self._in_flight -= 1
        session = self._sessions.get(turn.session_id) if turn.session_id is not None else None
        if session is not None and session.active_turn == turn_id:
            session.active_turn = None

    def _cancel(self, turn_id: str, reason: str) -> list[Command]:
        turn = self._turns[turn_id]
        if turn.state in (TurnState.CANCELLING, TurnState.FAILED):
            return []
        turn.state = TurnState.CANCELLING
        self._uncount(turn_id, turn)
        self._cancelled += 1
        return [CancelTurn(turn_id, reason)]

    def _cancel_session_turn(self, session_id: str, reason: str) -> list[Command]:
        turn_id = self.active_turn(session_id)
        return self._cancel(turn_id, reason) if turn_id else []

    def _touch(self, session_id: str, now: float) -> _Session:
        session = self._sessions.get(session_id)
        if session is None:
            session = self._sessions[session_id] = _Session(now)
        else:
            session.last_active_s = now
            self._sessions.move_to_end(session_id)
        return session

    def _expire_waiters(self, now: float) -> list[Command]:
        commands: list[Command] = []
        while self._waiters and self._waiters[0][0] <= now:
            _, turn_id = self._waiters.popleft()
            turn = self._turns.get(turn_id)
            if turn is not None and turn.state is TurnState.WAITING:
                turn.state = TurnState.FAILED
                self._uncount(turn_id, turn)
                self._timeouts += 1
                commands.append(FailTurn(turn_id, "provider_limit_timeout"))
        return commands

    def _expire_sessions(self, now: float) -> list[Command]:
        commands: list[Command] = []
        ttl = self.limits.session_ttl_s
        while self._sessions:
            session_id, session = next(iter(self._sessions.items()))
            if session.last_active_s + ttl > now:
                break
            if session.active_turn is not None:
                self._touch(session_id, now)  # busy sessions never expire mid-turn
                continue
            del self._sessions[session_id]
            self._evicted += 1
            commands.append(EvictSession(session_id))
        return commands
