"""Sessions and messages as rows, shared by the SQLite and PostgreSQL stores (the same columns
in both; `usage` and `metadata` are JSON text)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from agentos.kernel import ON_BUSY
from agentos.store.records import MessageRecord, SessionRecord

MESSAGE_COLUMNS = "message_id, tenant_id, session_id, turn_id, role, content, status, usage, created_at_ms"

_encode = msgspec.json.encode
_decode = msgspec.json.decode


def message_params(r: MessageRecord) -> tuple[Any, ...]:
    """A message's insert parameters, in `INSERT_MESSAGE`'s column order (both stores)."""
    usage = _encode(r.usage).decode() if r.usage is not None else None
    return (r.tenant_id, r.session_id, r.turn_id, r.role, r.content, r.status, usage, r.created_at_ms)


def message_from_row(row: Any) -> MessageRecord:
    mid, tenant, sid, tid, role, content, status, usage, created = row
    return MessageRecord(
        message_id=mid,
        tenant_id=tenant,
        session_id=sid,
        turn_id=tid,
        role=role,
        content=content,
        status=status,
        usage=_decode(usage) if usage else None,
        created_at_ms=created,
    )


SESSION_COLUMNS = "session_id, tenant_id, agent, metadata, created_at_ms, on_busy, owner"


def session_from_row(row: Any) -> SessionRecord:
    sid, tenant, agent, metadata, created, on_busy, owner = row
    return SessionRecord(
        session_id=sid,
        tenant_id=tenant,
        agent=agent,
        metadata=_decode(metadata),
        created_at_ms=created,
        on_busy=on_busy if on_busy in ON_BUSY else None,
        owner=owner,
    )


def idle_page(rows: Sequence[Sequence[Any]], limit: int) -> tuple[list[str], str | None]:
    """`Store.idle_sessions`' answer from a page of (session_id, idle) rows in id order."""
    idle = [row[0] for row in rows if row[1]]
    return idle, (rows[-1][0] if len(rows) == limit else None)
