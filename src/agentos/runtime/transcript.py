"""What a turn writes: its messages and events, as store records."""

from __future__ import annotations

from typing import Any

from agentos.clock import wall_ms
from agentos.providers.base import Message
from agentos.runtime.turn import TERMINAL_EVENTS, Turn, TurnSink
from agentos.store.base import Store
from agentos.store.records import EventRecord, MessageRecord


def message(turn: Turn, role: Any, content: str, status: Any, usage: dict[str, int] | None = None) -> MessageRecord:
    return MessageRecord(
        tenant_id=turn.tenant_id,
        session_id=turn.session_id,
        turn_id=turn.turn_id,
        role=role,
        content=content,
        status=status,
        usage=usage,
        created_at_ms=wall_ms(),
    )


def event(turn: Turn, name: str, data: dict[str, Any]) -> EventRecord:
    """The turn's latest event (numbered `turn.seq`) as a record."""
    return EventRecord(
        tenant_id=turn.tenant_id,
        session_id=turn.session_id,
        turn_id=turn.turn_id,
        type=name,
        data=data,
        created_at_ms=wall_ms(),
        seq=turn.seq,
    )


def record_event(store: Store, turn: Turn, name: str, data: dict[str, Any]) -> None:
    """Store the turn's latest event (numbered `turn.seq`): a resumed stream replays it. A
    terminal event is never shed."""
    store.add_event(event(turn, name, data), durable=name in TERMINAL_EVENTS)


def as_messages(history: list[MessageRecord]) -> list[Message]:
    """The model's view of a transcript: user messages and completed answers."""
    return [{"role": m.role, "content": m.content} for m in history if m.role == "user" or m.status == "completed"]


async def begin(store: Store, turn: Turn, sink: TurnSink, history_max_messages: int) -> list[Message]:
    """Announce the turn and store its input; return the session's earlier messages
    (`history_max_messages` in all with this turn's input); none when the turn brings its own
    conversation (`Turn.prompt`)."""
    started = {"turn_id": turn.turn_id, "session_id": turn.session_id}
    await sink.send(turn.next_event_id(), "turn.started", started)
    record_event(store, turn, "turn.started", started)
    await store.wait_space()
    earlier = 0 if turn.prompt is not None else history_max_messages - 1
    history = await store.history(turn.tenant_id, turn.session_id, limit=earlier) if earlier else []
    store.add_message(message(turn, "user", turn.input, "completed"))
    turn.asked = True
    return as_messages(history)
