"""The PostgreSQL store's rows: its statements and a message's parameters (`agentos.store.postgres`
runs them; the fenced variants are `agentos.store.pg_fence`'s; rows back to records:
`agentos.store.rows`, shared with SQLite)."""

from __future__ import annotations

from typing import Any

import msgspec

from agentos.store import rows
from agentos.store.records import EventRecord, MessageRecord

_encode = msgspec.json.encode

# A batch applied again after a failure may repeat a write, so the writes with a natural key
# are idempotent. Events and access rows have none; they are sheddable anyway.
INSERT_SESSION = (
    "INSERT INTO sessions (session_id, tenant_id, agent, metadata, created_at_ms, on_busy, owner)"
    " VALUES ($1, $2, $3, $4::jsonb, $5, $6, $7) ON CONFLICT (session_id) DO NOTHING"
)
# A message, with its turn's terminal event when $9 (its type) is not NULL (`commit_answer`):
# one statement, so the event is stored exactly when the answer is, and every write of the
# messages lane stays one statement (one `executemany` per batch). `{fence}`: pg_fence's.
MESSAGE_AND_EVENT = """
WITH answer AS (
INSERT INTO messages (tenant_id, session_id, turn_id, role, content, status, usage, created_at_ms)
SELECT $1::text, $2::text, $3::text, $4::text, $5::text, $6::text, $7::jsonb, $8::bigint{fence}
ON CONFLICT (turn_id, role) DO UPDATE SET content = excluded.content, status = excluded.status, usage = excluded.usage
RETURNING 1)
INSERT INTO events (tenant_id, session_id, turn_id, type, data, created_at_ms, seq)
SELECT $1::text, $2::text, $3::text, $9::text, $10::jsonb, $11::bigint, $12::bigint
FROM answer WHERE $9::text IS NOT NULL
"""
INSERT_MESSAGE = MESSAGE_AND_EVENT.format(fence="")
INSERT_EVENT = (
    "INSERT INTO events (tenant_id, session_id, turn_id, type, data, created_at_ms, seq)"
    " VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7)"
)
INSERT_ACCESS = (
    "INSERT INTO access_log (tenant_id, ts_ms, method, path, status, duration_ms, remote, key_id, trace_id, subject)"
    " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
)
TOKENS_SINCE = """SELECT tenant_id, SUM(COALESCE((usage->>'prompt_tokens')::bigint, 0)
+ COALESCE((usage->>'completion_tokens')::bigint, 0)) FROM messages
WHERE usage IS NOT NULL AND created_at_ms >= $1 GROUP BY tenant_id"""


def message_params(r: MessageRecord, event: EventRecord | None = None) -> tuple[Any, ...]:
    """`INSERT_MESSAGE`'s parameters; `event`: the turn's terminal event, stored with it."""
    row = rows.message_params(r)
    if event is None:
        return (*row, None, None, None, None)
    assert (event.tenant_id, event.session_id, event.turn_id) == row[:3], "an event of another turn"
    return (*row, event.type, _encode(event.data).decode(), event.created_at_ms, event.seq)


# A session's access rows (`records.access_params`: its path and the range of those below it).
DELETE_SESSION_ACCESS = "DELETE FROM access_log WHERE tenant_id = $1 AND (path = $2 OR (path >= $3 AND path < $4))"

# Retention (`agentos.runtime.retention`): as SQLite's (`sqlite_rows`), counted in one statement.
IDLE_SESSIONS = (
    "SELECT s.session_id, s.created_at_ms < $2 AND NOT EXISTS (SELECT 1 FROM messages m"
    " WHERE m.tenant_id = s.tenant_id AND m.session_id = s.session_id AND m.created_at_ms >= $2)"
    " FROM sessions s WHERE s.tenant_id = $1 AND s.session_id > $3 ORDER BY s.session_id LIMIT $4"
)
EXPIRE_ACCESS = (
    "WITH gone AS (DELETE FROM access_log WHERE id IN (SELECT id FROM access_log WHERE tenant_id = $1"
    " AND ts_ms < $2 ORDER BY ts_ms LIMIT $3) RETURNING 1) SELECT count(*) FROM gone"
)
EXPIRE_USAGE = (  # the ledger has no key of its own: its rows' physical ids, within the statement
    "WITH gone AS (DELETE FROM usage_ledger WHERE ctid IN (SELECT ctid FROM usage_ledger WHERE tenant_id = $1"
    " AND at_ms < $2 ORDER BY at_ms LIMIT $3) RETURNING 1) SELECT count(*) FROM gone"
)
