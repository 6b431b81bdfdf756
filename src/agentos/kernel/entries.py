"""What the kernel keeps per turn or stream: its state and its bookkeeping (`turns.py` moves it)."""

from __future__ import annotations

from enum import Enum


class TurnState(Enum):
    WAITING = "waiting"  # for a provider permit
    STREAMING = "streaming"  # holds a permit
    RUNNING = "running"  # admitted without a permit of its own (wants_permit=False)
    QUEUED = "queued"  # behind its session's active turn (enqueue, or a steer not yet claimed)
    CANCELLING = "cancelling"
    FAILED = "failed"


class TurnEntry:
    __slots__ = ("counted", "owner", "session_id", "state", "steer_into", "tenant", "wants_permit")

    def __init__(self, session_id: str | None, owner: str | None, state: TurnState, tenant: str) -> None:
        self.session_id = session_id  # None: a stream outside any session turn
        self.owner = owner  # the run a stream belongs to, if any
        self.state = state
        self.tenant = tenant
        self.counted = session_id is not None and state is not TurnState.QUEUED  # in `in_flight`
        self.wants_permit = state is TurnState.WAITING
        self.steer_into: str | None = None  # a queued steer: the agent turn it is offered to
