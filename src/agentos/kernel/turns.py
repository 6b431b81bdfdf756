"""Session turns and provider streams: admission, last-wins, permits and session TTL.

Theory of operation
-------------------
The table holds two kinds of entries that share the permit pool: session turns
(`TurnSubmitted`) and streams outside any turn (`StreamRequested`: a run's model call, owned by
its run). A turn moves through these states:

    submitted --(over the admission limit)--> rejected             [RejectTurn]
    (`TurnOffered`, before a turn has an id, answers the same `RejectTurn`, or nothing)
    submitted --> waiting --(permit free)--> streaming              [AcceptTurn, GrantPermit]
    submitted --(wants_permit=False)--> running                     [AcceptTurn]
    (a stream skips admission and queues for a permit: waiting, then streaming)
    waiting   --(permit wait deadline)--> failed                    [FailTurn("provider_limit_timeout")]
    waiting   --(its run stopped)--> failed                         [FailTurn(reason)]
    waiting | streaming | running --(cancel, a newer turn in its session, its run stopped)--> cancelling
                                                                   [CancelTurn]
    any state --(TurnEnded)--> gone

A `running` turn is a session turn run by an agent: it is admitted, counted and superseded like
any turn, but its model calls are its run's streams, which queue for permits of their own. It
never waits for a permit itself, so no permit is ever granted to a task that will not use it.

Counting rules:
- `in_flight` counts each session's *active* turn. A turn leaves the count the moment it is
  cancelled or fails, so a superseding turn never pushes the count over the limit.
- Over the limit every new turn is rejected before anything changes, one meant to replace its
  own session's running turn included: replacing costs a new upstream request, and that is the
  work the gate exists to refuse. The running turn goes on unharmed.
- Each tenant's admitted turns are counted the same way (`Tenants.turns`); over its
  `max_concurrent_turns` a turn is rejected by the same rule, with the tenant's code.
- A session idle (no active turn) for `session_ttl_s` is evicted; activity moves it to the
  back of an insertion-ordered dict, so expiry scans only the expired front.
"""

from __future__ import annotations

from collections import OrderedDict
from enum import Enum

from agentos.kernel.commands import (
    AcceptTurn,
    CancelTurn,
    Command,
    EvictSession,
    FailTurn,
    GrantPermit,
    RejectTurn,
    TurnRejection,
)
from agentos.kernel.limits import KernelLimits, refusal
from agentos.kernel.permits import PermitPool
from agentos.kernel.tenants import DEFAULT_TENANT, Tenants


class TurnState(Enum):
    WAITING = "waiting"  # for a provider permit
    STREAMING = "streaming"  # holds a permit
    RUNNING = "running"  # admitted without a permit of its own (wants_permit=False)
    CANCELLING = "cancelling"
    FAILED = "failed"


class _Turn:
    __slots__ = ("counted", "owner", "session_id", "state", "tenant")

    def __init__(self, session_id: str | None, owner: str | None, state: TurnState, tenant: str) -> None:
        self.session_id = session_id  # None: a stream outside any session turn
        self.owner = owner  # the run a stream belongs to, if any
        self.state = state
        self.tenant = tenant
        self.counted = session_id is not None  # in `in_flight` (streams never are)


class _Session:
    __slots__ = ("active_turn", "last_active_s")

    def __init__(self, now: float) -> None:
        self.active_turn: str | None = None
        self.last_active_s = now


class Turns:
    def __init__(self, limits: KernelLimits, permits: PermitPool, tenants: Tenants) -> None:
        self.limits = limits
        self.permits = permits
        self.tenants = tenants
        self.sessions: OrderedDict[str, _Session] = OrderedDict()
        self.table: dict[str, _Turn] = {}
        self.in_flight = 0
        self.admitted = self.rejected = self.cancelled = self.timeouts = self.evicted = 0

    # -- queries -------------------------------------------------------------------------------

    def active_turn(self, session_id: str) -> str | None:
        session = self.sessions.get(session_id)
        return session.active_turn if session else None

    def state(self, turn_id: str) -> TurnState | None:
        turn = self.table.get(turn_id)
        return turn.state if turn else None

    def owner(self, turn_id: str) -> str | None:
        turn = self.table.get(turn_id)
        return turn.owner if turn else None

    def next_deadline(self) -> float | None:
        permit_deadline = self.permits.next_deadline()
        for session in self.sessions.values():  # the front one is the least recently active
            ttl_deadline = session.last_active_s + self.limits.session_ttl_s
            return ttl_deadline if permit_deadline is None else min(ttl_deadline, permit_deadline)
        return permit_deadline

    # -- transitions ---------------------------------------------------------------------------

    def submit(
        self, session_id: str, turn_id: str, wants_permit: bool, now: float, tenant: str = DEFAULT_TENANT
    ) -> list[Command]:
        assert turn_id not in self.table, f"turn {turn_id!r} submitted twice"
        rejection = self._over_limit(tenant)
        if rejection is not None:
            self.rejected += 1
            return [RejectTurn(turn_id, self.limits.retry_after_s, rejection)]
        session = self.touch(session_id, now)
        commands: list[Command] = []
        if session.active_turn is not None:
            commands += self._cancel(session.active_turn, "superseded")
        state = TurnState.WAITING if wants_permit else TurnState.RUNNING
        self.table[turn_id] = _Turn(session_id, None, state, tenant)
        session.active_turn = turn_id
        self.in_flight += 1
        self.tenants.turns.add(tenant, 1)
        self.admitted += 1
        commands.append(AcceptTurn(turn_id))
        return commands + self._queue(turn_id, now) if wants_permit else commands

    def offer(self, tenant: str) -> list[Command]:
        """A turn of `tenant` is on its way in: refused now (and counted) if `submit` would refuse
        it; nothing changes otherwise."""
        rejection = self._over_limit(tenant)
        if rejection is None:
            return []
        self.rejected += 1
        return [RejectTurn("", self.limits.retry_after_s, rejection)]

    def _over_limit(self, tenant: str) -> TurnRejection | None:
        cap = self.tenants.share(tenant).max_concurrent_turns
        held = self.tenants.turns[tenant]
        return refusal(self.in_flight, self.limits.max_in_flight_turns, held, cap, "tenant_concurrent_turns")

    def request_stream(
        self, stream_id: str, owner: str | None, now: float, tenant: str = DEFAULT_TENANT
    ) -> list[Command]:
        assert stream_id not in self.table, f"stream {stream_id!r} requested twice"
        self.table[stream_id] = _Turn(None, owner, TurnState.WAITING, tenant)
        return self._queue(stream_id, now)

    def _queue(self, turn_id: str, now: float) -> list[Command]:
        granted = self.permits.request(turn_id, self.table[turn_id].tenant, now)
        return self._grant([turn_id]) if granted else []

    def _grant(self, turn_ids: list[str]) -> list[Command]:
        for turn_id in turn_ids:
            self.table[turn_id].state = TurnState.STREAMING
        return [GrantPermit(turn_id) for turn_id in turn_ids]

    def release(self, turn_id: str) -> list[Command]:
        return self._grant(self.permits.release(turn_id))

    def end(self, turn_id: str, now: float) -> list[Command]:
        turn = self.table.get(turn_id)
        if turn is None:
            return []
        self.permits.withdraw(turn_id)
        commands = self.release(turn_id)
        self._uncount(turn_id, turn)
        del self.table[turn_id]
        if turn.session_id is not None and turn.session_id in self.sessions:
            self.touch(turn.session_id, now)
        return commands

    def _uncount(self, turn_id: str, turn: _Turn) -> None:
        """Take the turn out of `in_flight` and out of its session's active slot."""
        if turn.counted:  # then it is its session's active turn, and the session is in memory
            turn.counted = False
            self.in_flight -= 1
            self.tenants.turns.add(turn.tenant, -1)
            assert turn.session_id is not None
            session = self.sessions[turn.session_id]
            assert session.active_turn == turn_id
            session.active_turn = None

    def _cancel(self, turn_id: str, reason: str) -> list[Command]:
        turn = self.table[turn_id]
        if turn.state in (TurnState.CANCELLING, TurnState.FAILED):
            return []
        self.permits.withdraw(turn_id)
        turn.state = TurnState.CANCELLING
        self._uncount(turn_id, turn)
        self.cancelled += 1
        return [CancelTurn(turn_id, reason)]

    def cancel_session_turn(self, session_id: str, reason: str) -> list[Command]:
        turn_id = self.active_turn(session_id)
        return self._cancel(turn_id, reason) if turn_id else []

    def close_session(self, session_id: str) -> list[Command]:
        commands = self.cancel_session_turn(session_id, "session_deleted")
        self.sessions.pop(session_id, None)
        return commands

    def stop_stream(self, stream_id: str, reason: str) -> list[Command]:
        """Its run stopped: a waiting stream fails, a streaming one is cancelled (aborted)."""
        turn = self.table[stream_id]  # a run forgets its streams when they end
        if turn.state is not TurnState.WAITING:
            return self._cancel(stream_id, reason)
        self.permits.withdraw(stream_id)
        turn.state = TurnState.FAILED
        return [FailTurn(stream_id, reason)]

    def touch(self, session_id: str, now: float) -> _Session:
        session = self.sessions.get(session_id)
        if session is None:
            session = self.sessions[session_id] = _Session(now)
        else:
            session.last_active_s = now
            self.sessions.move_to_end(session_id)
        return session

    def tick(self, now: float) -> list[Command]:
        return self._expire_waiters(now) + self._expire_sessions(now)

    def _expire_waiters(self, now: float) -> list[Command]:
        commands: list[Command] = []
        for turn_id in self.permits.expire(now):
            turn = self.table[turn_id]  # the line holds live waiters only
            turn.state = TurnState.FAILED
            self._uncount(turn_id, turn)
            self.timeouts += 1
            commands.append(FailTurn(turn_id, "provider_limit_timeout"))
        return commands

    def _expire_sessions(self, now: float) -> list[Command]:
        commands: list[Command] = []
        ttl = self.limits.session_ttl_s
        while self.sessions:
            session_id, session = next(iter(self.sessions.items()))
            if session.last_active_s + ttl > now:
                break
            if session.active_turn is not None:
                self.touch(session_id, now)  # busy sessions never expire mid-turn
                continue
            del self.sessions[session_id]
            self.evicted += 1
            commands.append(EvictSession(session_id))
        return commands
