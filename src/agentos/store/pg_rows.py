"""The PostgreSQL store's rows: its statements, and the conversions between rows and records
(`agentos.store.postgres` runs them; the fenced variants are `agentos.store.pg_fence`'s)."""

from __future__ import annotations

from typing import Any

import msgspec

from agentos.store.records import MessageRecord, SessionRecord

_encode = msgspec.json.encode
_decode = msgspec.json.decode

# A batch applied again after a failure may repeat a write, so the writes with a natural key
# are idempotent. Events and access rows have none; they are sheddable anyway.
INSERT_SESSION = "INSERT INTO sessions VALUES ($1, $2, $3, $4::jsonb, $5) ON CONFLICT (session_id) DO NOTHING"
INSERT_MESSAGE = """
INSERT INTO messages (tenant_id, session_id, turn_id, role, content, status, usage, created_at_ms)
VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8)
ON CONFLICT (turn_id, role) DO UPDATE SET content = excluded.content, status = excluded.status, usage = excluded.usage
"""
INSERT_EVENT = (
    "INSERT INTO events (tenant_id, session_id, turn_id, type, data, created_at_ms, seq)"
    " VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7)"
)
INSERT_ACCESS = (
    "INSERT INTO access_log (tenant_id, ts_ms, method, path, status, duration_ms, remote, key_id)"
    " VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
)
MESSAGE_COLUMNS = "message_id, tenant_id, session_id, turn_id, role, content, status, usage, created_at_ms"
SESSION_COLUMNS = "session_id, tenant_id, agent, metadata, created_at_ms"
TOKENS_SINCE = """SELECT tenant_id, SUM(COALESCE((usage->>'prompt_tokens')::bigint, 0)
+ COALESCE((usage->>'completion_tokens')::bigint, 0)) FROM messages
WHERE usage IS NOT NULL AND created_at_ms >= $1 GROUP BY tenant_id"""


def message_params(r: MessageRecord) -> tuple[Any, ...]:
    usage = _encode(r.usage).decode() if r.usage is not None else None
    return (r.tenant_id, r.session_id, r.turn_id, r.role, r.content, r.status, usage, r.created_at_ms)


def message_from_row(row: Any) -> MessageRecord:
    mid, tenant, sid, tid, role, content, status, usage, created = row
    return MessageRecord(
        message_id=mid, tenant_id=tenant, session_id=sid, turn_id=tid, role=role, content=content,
        status=status, usage=_decode(usage) if usage else None, created_at_ms=created,
    )  # fmt: skip


def session_from_row(row: Any) -> SessionRecord:
    sid, tenant, agent, metadata, created = row
    return SessionRecord(
        session_id=sid, tenant_id=tenant, agent=agent, metadata=_decode(metadata), created_at_ms=created
    )
