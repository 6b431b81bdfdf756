"""A turn in the runtime: its identity, its outbound event channel and its bookkeeping."""

from __future__ import annotations

import asyncio
from typing import Any, Literal

EventName = Literal["turn.started", "token", "turn.completed", "turn.cancelled", "turn.failed"]
TERMINAL_EVENTS: frozenset[str] = frozenset({"turn.completed", "turn.cancelled", "turn.failed"})

# (event id, name, data); the id is "<turn_id>:<seq>" so a later resume can name its place.
TurnEvent = tuple[str, str, dict[str, Any]]


class Turn:
    __slots__ = (
        "turn_id",
        "session_id",
        "input",
        "events",
        "task",
        "permit",
        "cancel_reason",
        "finishing",
        "submitted_s",
        "_seq",
    )

    def __init__(self, turn_id: str, session_id: str, text: str, submitted_s: float) -> None:
        self.turn_id = turn_id
        self.session_id = session_id
        self.input = text
        self.events: asyncio.Queue[TurnEvent] = asyncio.Queue()
        self.task: asyncio.Task[None] | None = None
        # None until the kernel grants a permit; a future while the turn waits for one.
        self.permit: asyncio.Future[None] | None = None
        self.cancel_reason: str | None = None
        self.finishing = False  # the answer is complete: a cancel no longer applies
        self.submitted_s = submitted_s
        self._seq = 0

    def emit(self, name: EventName, data: dict[str, Any]) -> None:
        self._seq += 1
        self.events.put_nowait((f"{self.turn_id}:{self._seq}", name, data))

    async def next_event(self) -> TurnEvent:
        return await self.events.get()
