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
    submitted --(session busy, enqueue or steer)--> queued          [QueueTurn (+ SteerTurn)]
    queued    --(the active turn left its slot)--> waiting | running  [AcceptTurn (+ GrantPermit)]
    queued    --(cancelled, replaced)--> cancelling                 [CancelTurn]
    queued    --(SteerClaimed by the turn it steers)--> gone        [DeliverSteer]
    any state --(TurnEnded)--> gone

A busy session answers a new turn by its `on_busy` (`busy.py`); its queue is `queues.py`.

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
- A session idle (no active turn) for `session_ttl_s` is evicted (`sessions.py`).
"""

from __future__ import annotations

from agentos.kernel.busy import DEFAULT_ON_BUSY, Enqueue, OnBusy, Refuse, decide
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
from agentos.kernel.entries import TurnEntry, TurnState
from agentos.kernel.limits import KernelLimits, refusal
from agentos.kernel.permits import PermitPool
from agentos.kernel.queues import SessionQueues
from agentos.kernel.sessions import Session, Sessions
from agentos.kernel.tenants import DEFAULT_TENANT, Tenants


class Turns:
    def __init__(self, limits: KernelLimits, permits: PermitPool, tenants: Tenants) -> None:
        self.limits = limits
        self.permits = permits
        self.tenants = tenants
        self.sessions = Sessions()
        self.table: dict[str, TurnEntry] = {}
        self.in_flight = 0
        self.admitted = self.rejected = self.cancelled = self.timeouts = self.evicted = 0
        self.refused_busy = 0
        self.queues = SessionQueues(self.sessions, self.table, self._activate, self._cancel)

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
        deadlines = [self.permits.next_deadline(), self.sessions.next_expiry(self.limits.session_ttl_s)]
        return min((d for d in deadlines if d is not None), default=None)

    # -- transitions ---------------------------------------------------------------------------

    def submit(
        self,
        session_id: str,
        turn_id: str,
        wants_permit: bool,
        now: float,
        tenant: str = DEFAULT_TENANT,
        on_busy: OnBusy = DEFAULT_ON_BUSY,
    ) -> list[Command]:
        assert turn_id not in self.table, f"turn {turn_id!r} submitted twice"
        rejection = self._over_limit(tenant)
        if rejection is not None:
            self.rejected += 1
            return [RejectTurn(turn_id, self.limits.retry_after_s, rejection)]
        session = self.touch(session_id, now)
        commands: list[Command] = []
        active = session.active_turn
        if active is not None:
            agent_running = self.table[active].state is TurnState.RUNNING
            limit = self.limits.max_queued_turns_per_session
            decision = decide(on_busy, agent_running=agent_running, queued=len(session.queue), max_queued=limit)
            if isinstance(decision, Refuse):
                self.refused_busy += 1
                return [RejectTurn(turn_id, self.limits.retry_after_s, decision.code, active)]
            if isinstance(decision, Enqueue):
                steer_into = active if decision.steer else None
                return self.queues.enqueue(session_id, turn_id, wants_permit, tenant, steer_into)
            commands += self.queues.cancel_all(session, "superseded")
            commands += self._cancel(active, "superseded", decision.rollback)
        state = TurnState.WAITING if wants_permit else TurnState.RUNNING
        self.table[turn_id] = TurnEntry(session_id, None, state, tenant)
        return commands + self._activate(session, turn_id, now)

    def _activate(self, session: Session, turn_id: str, now: float) -> list[Command]:
        """Make `turn_id` (admitted, or the head of the queue) its session's active turn."""
        turn = self.table[turn_id]
        session.active_turn = turn_id
        self.admitted += 1
        turn.counted = True
        self.in_flight += 1
        self.tenants.turns.add(turn.tenant, 1)
        commands: list[Command] = [AcceptTurn(turn_id)]
        return commands + self._queue(turn_id, now) if turn.wants_permit else commands

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
        self.table[stream_id] = TurnEntry(None, owner, TurnState.WAITING, tenant)
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
        self.queues.leave(turn_id, turn)
        was_active = self._uncount(turn_id, turn)
        del self.table[turn_id]
        if turn.session_id is not None and turn.session_id in self.sessions:
            self.touch(turn.session_id, now)
            if was_active:
                commands += self.queues.promote(turn.session_id, now)
        return commands

    def _uncount(self, turn_id: str, turn: TurnEntry) -> bool:
        """Take the turn out of `in_flight` and out of its session's active slot; whether it
        held that slot (the caller then promotes the session's queue)."""
        if not turn.counted:
            return False
        # then it is its session's active turn, and the session is in memory
        turn.counted = False
        self.in_flight -= 1
        self.tenants.turns.add(turn.tenant, -1)
        assert turn.session_id is not None
        session = self.sessions[turn.session_id]
        assert session.active_turn == turn_id
        session.active_turn = None
        return True

    def _cancel(self, turn_id: str, reason: str, rollback: bool = False) -> list[Command]:
        turn = self.table[turn_id]
        if turn.state in (TurnState.CANCELLING, TurnState.FAILED):
            return []
        self.permits.withdraw(turn_id)
        self.queues.leave(turn_id, turn)
        turn.state = TurnState.CANCELLING
        self._uncount(turn_id, turn)
        self.cancelled += 1
        return [CancelTurn(turn_id, reason, rollback)]

    def cancel_session_turn(self, session_id: str, reason: str, now: float) -> list[Command]:
        """Cancel the session's active turn; the queue moves on."""
        turn_id = self.active_turn(session_id)
        return self._cancel(turn_id, reason) + self.queues.promote(session_id, now) if turn_id else []

    def cancel_turn(self, turn_id: str, reason: str, now: float) -> list[Command]:
        """Cancel one turn of a session by id: a queued one leaves the queue, the active one is
        cancelled and the queue moves on. Streams and unknown ids: []."""
        turn = self.table.get(turn_id)
        if turn is None or turn.session_id is None:
            return []
        if turn.counted:
            return self.cancel_session_turn(turn.session_id, reason, now)
        return self._cancel(turn_id, reason) if turn.state is TurnState.QUEUED else []

    def close_session(self, session_id: str) -> list[Command]:
        session = self.sessions.get(session_id)
        commands = self.queues.cancel_all(session, "session_deleted") if session is not None else []
        turn_id = self.active_turn(session_id)
        commands += self._cancel(turn_id, "session_deleted") if turn_id else []
        self.sessions.drop(session_id)
        return commands

    def stop_stream(self, stream_id: str, reason: str) -> list[Command]:
        """Its run stopped: a waiting stream fails, a streaming one is cancelled (aborted)."""
        turn = self.table[stream_id]  # a run forgets its streams when they end
        if turn.state is not TurnState.WAITING:
            return self._cancel(stream_id, reason)
        self.permits.withdraw(stream_id)
        turn.state = TurnState.FAILED
        return [FailTurn(stream_id, reason)]

    def touch(self, session_id: str, now: float) -> Session:
        return self.sessions.touch(session_id, now)

    def tick(self, now: float) -> list[Command]:
        return self._expire_waiters(now) + self._expire_sessions(now)

    def _expire_waiters(self, now: float) -> list[Command]:
        commands: list[Command] = []
        for turn_id in self.permits.expire(now):
            turn = self.table[turn_id]  # the line holds live waiters only
            turn.state = TurnState.FAILED
            was_active = self._uncount(turn_id, turn)
            self.timeouts += 1
            commands.append(FailTurn(turn_id, "provider_limit_timeout"))
            if was_active:
                assert turn.session_id is not None
                commands += self.queues.promote(turn.session_id, now)
        return commands

    def _expire_sessions(self, now: float) -> list[Command]:
        evicted = self.sessions.expire(now, self.limits.session_ttl_s)
        self.evicted += len(evicted)
        return [EvictSession(session_id) for session_id in evicted]
