"""A busy session's queue: turns waiting behind its active turn, and steered messages.

Theory of operation
-------------------
A busy session (one with an active turn) answers a new turn by its `on_busy` (`busy.py`). A
turn that waits joins its session's FIFO queue, bounded by `max_queued_turns_per_session`. A
queued turn holds nothing: it is not in `in_flight`, holds no permit and has written nothing.

- When the active turn leaves its slot (it ends, fails, or is cancelled alone) the head of the
  queue is promoted at once into the slot just freed (`promote`), so promotion never goes over
  a limit and a session never has two active turns.
- A replacing turn (replace, rollback) cancels the queue first, then the active turn, so
  nothing is promoted in between; deleting the session does the same.
- A steer is a queued turn offered to the active agent turn (`steer_into`). That turn claims it
  at its next step (`claim_steer` -> `DeliverSteer`: the queued turn is gone, its message is
  the agent's); if the agent turn leaves its slot first, the steer is promoted like any queued
  turn. Both happen here, in one synchronous call each, so a steered message is delivered
  exactly once or runs as a turn, never both and never neither.

`Turns` owns the turn table and the counts; it hands this class the two moves that touch
them (`activate`: make a turn its session's active one; `cancel`: cancel a turn).
"""

from __future__ import annotations

from collections.abc import Callable

from agentos.kernel.commands import Command, DeliverSteer, QueueTurn, SteerTurn
from agentos.kernel.entries import TurnEntry, TurnState
from agentos.kernel.sessions import Session, Sessions


class SessionQueues:
    def __init__(
        self,
        sessions: Sessions,
        table: dict[str, TurnEntry],
        activate: Callable[[Session, str, float], list[Command]],
        cancel: Callable[[str, str], list[Command]],
    ) -> None:
        self._sessions = sessions
        self._table = table
        self._activate = activate
        self._cancel = cancel
        self.queued = self.steered = 0  # totals, for statistics

    def enqueue(
        self, session_id: str, turn_id: str, wants_permit: bool, tenant: str, steer_into: str | None
    ) -> list[Command]:
        turn = self._table[turn_id] = TurnEntry(session_id, None, TurnState.QUEUED, tenant)
        turn.wants_permit = wants_permit
        turn.steer_into = steer_into
        ahead = self._sessions.enqueue(self._sessions[session_id], turn_id)
        self.queued += 1
        commands: list[Command] = [QueueTurn(turn_id, ahead)]
        return commands + [SteerTurn(turn_id, steer_into)] if steer_into is not None else commands

    def promote(self, session_id: str, now: float) -> list[Command]:
        """The active turn left its slot: the head of the queue takes it."""
        session = self._sessions.get(session_id)
        if session is None or session.active_turn is not None or not session.queue:
            return []
        turn_id = self._sessions.pop_next(session)
        turn = self._table[turn_id]
        turn.state = TurnState.WAITING if turn.wants_permit else TurnState.RUNNING
        turn.steer_into = None  # the turn it steered ended first: it runs as a turn of its own
        return self._activate(session, turn_id, now)

    def cancel_all(self, session: Session, reason: str) -> list[Command]:
        commands: list[Command] = []
        while session.queue:
            commands += self._cancel(session.queue[-1], reason)  # newest first: each leaves the queue
        return commands

    def leave(self, turn_id: str, turn: TurnEntry) -> None:
        """A queued turn is cancelled or ended: out of its session's queue."""
        if turn.state is TurnState.QUEUED:
            assert turn.session_id is not None
            self._sessions.remove(turn.session_id, turn_id)

    def claim_steer(self, turn_id: str, into_turn_id: str) -> list[Command]:
        turn = self._table.get(turn_id)
        if turn is None or turn.state is not TurnState.QUEUED or turn.steer_into != into_turn_id:
            return []  # promoted, cancelled or ended meanwhile: it is not the running turn's
        assert turn.session_id is not None
        if self._sessions[turn.session_id].active_turn != into_turn_id:
            return []  # the turn it steers was cancelled (still winding down): it waits its turn
        self._sessions.remove(turn.session_id, turn_id)
        del self._table[turn_id]
        self.steered += 1
        return [DeliverSteer(turn_id, into_turn_id)]
