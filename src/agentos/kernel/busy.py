"""What a turn does when its session is busy: the double-text strategies, as one pure decision.

Theory of operation
-------------------
A session is busy while it has an active turn (`Turns.sessions[...].active_turn`); its queue
(turns waiting behind the active one) is never non-empty otherwise, because the kernel promotes
the head of the queue the moment the active turn leaves its slot. A turn that arrives then
carries an `on_busy` strategy (its own, or its session's default) and `decide` says what the
kernel does with it:

    replace   -> Replace(rollback=False)   the active turn and every queued one are cancelled
                                           ("superseded"); the new turn is admitted (last-wins)
    rollback  -> Replace(rollback=True)    the same, and the active turn's messages are removed
                                           from the transcript instead of kept as cancelled
    reject    -> Refuse("turn_in_progress")  nothing changes; 409 with the active turn's id
    enqueue   -> Enqueue(steer=False)      it waits at the back of the session's queue, or
                 Refuse("turn_queue_full")   over `max_queued_turns_per_session` (429)
    steer     -> Enqueue(steer=True)       the active turn is an agent's: the message waits in
                                           the queue until that turn claims it at its next step
                                           (`SteerClaimed` -> `DeliverSteer`), or, should the
                                           turn end first, it is promoted like a queued turn
              -> Replace(rollback=False)   the active turn is a plain chat turn: nothing to
                                           steer, so steer means replace

Whatever the strategy, the admission gate decides first (`Turns.submit`): a refused turn
changes nothing in its session.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

OnBusy = Literal["replace", "reject", "enqueue", "rollback", "steer"]
ON_BUSY: tuple[OnBusy, ...] = get_args(OnBusy)
DEFAULT_ON_BUSY: OnBusy = "replace"
BusyRefusal = Literal["turn_in_progress", "turn_queue_full"]


@dataclass(frozen=True, slots=True)
class Replace:
    rollback: bool


@dataclass(frozen=True, slots=True)
class Refuse:
    code: BusyRefusal


@dataclass(frozen=True, slots=True)
class Enqueue:
    steer: bool


Decision = Replace | Refuse | Enqueue


def decide(on_busy: OnBusy, *, agent_running: bool, queued: int, max_queued: int) -> Decision:
    """What a turn with `on_busy` does in a busy session.

    Args:
        on_busy: the turn's strategy.
        agent_running: the active turn is run by an agent (it can take a steered message).
        queued: turns already waiting in the session's queue.
        max_queued: the bound of that queue (`max_queued_turns_per_session`).
    """
    if on_busy == "reject":
        return Refuse("turn_in_progress")
    if on_busy in ("replace", "rollback") or (on_busy == "steer" and not agent_running):
        return Replace(rollback=on_busy == "rollback")
    if queued >= max_queued:
        return Refuse("turn_queue_full")
    return Enqueue(steer=on_busy == "steer")
