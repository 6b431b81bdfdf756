"""The rows of the SQLite session store: its tables (created, or migrated, when a file is opened),
its insert statements, records to statement parameters, and rows back to records
(`agentos.store.sqlite` runs them)."""

from __future__ import annotations

import sqlite3
from typing import Any

import msgspec

from agentos.store.records import MessageRecord, SessionRecord

SESSIONS_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    agent TEXT NOT NULL,
    metadata TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    message_id INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    status TEXT NOT NULL,
    usage TEXT,
    created_at_ms INTEGER NOT NULL,
    UNIQUE (turn_id, role)
);
CREATE INDEX IF NOT EXISTS sessions_by_tenant ON sessions (tenant_id, session_id);
CREATE INDEX IF NOT EXISTS messages_by_tenant ON messages (tenant_id, session_id, message_id);
DROP INDEX IF EXISTS messages_by_session;
"""

EVENTS_SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    event_id INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    type TEXT NOT NULL,
    data TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_tenant ON events (tenant_id, session_id, event_id);
DROP INDEX IF EXISTS events_by_session;
"""

ACCESS_SCHEMA = """
CREATE TABLE IF NOT EXISTS access_log (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id TEXT NOT NULL,
    ts_ms INTEGER NOT NULL,
    method TEXT NOT NULL,
    path TEXT NOT NULL,
    status INTEGER NOT NULL,
    duration_ms REAL NOT NULL,
    remote TEXT NOT NULL,
    key_id TEXT NOT NULL DEFAULT ''
);
"""


def migrate_access(conn: sqlite3.Connection) -> None:
    """Files made before keys existed lack `key_id`: add it (old rows read '')."""
    columns = {row[1] for row in conn.execute("PRAGMA table_info(access_log)")}
    if "key_id" not in columns:
        conn.execute("ALTER TABLE access_log ADD COLUMN key_id TEXT NOT NULL DEFAULT ''")


# A writer retry may repeat a batch (after a COMMIT that reported failure), so writes with a
# natural key are idempotent. Events and access rows have none; they are sheddable anyway.
INSERT_SESSION = "INSERT INTO sessions VALUES (?, ?, ?, ?, ?) ON CONFLICT (session_id) DO NOTHING"
# Upsert: a turn has one message per role.
INSERT_MESSAGE = """
INSERT INTO messages (tenant_id, session_id, turn_id, role, content, status, usage, created_at_ms)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (turn_id, role) DO UPDATE SET content = excluded.content, status = excluded.status, usage = excluded.usage
"""
INSERT_ACCESS = (
    "INSERT INTO access_log (tenant_id, ts_ms, method, path, status, duration_ms, remote, key_id)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)

_encode = msgspec.json.encode
_decode = msgspec.json.decode


def message_params(r: MessageRecord) -> tuple[Any, ...]:
    usage = _encode(r.usage).decode() if r.usage is not None else None
    return (r.tenant_id, r.session_id, r.turn_id, r.role, r.content, r.status, usage, r.created_at_ms)


def message_from_row(row: tuple[Any, ...]) -> MessageRecord:
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


def session_from_row(row: tuple[Any, ...]) -> SessionRecord:
    sid, tenant, agent, metadata, created = row
    return SessionRecord(
        session_id=sid, tenant_id=tenant, agent=agent, metadata=_decode(metadata), created_at_ms=created
    )


MESSAGE_COLUMNS = "message_id, tenant_id, session_id, turn_id, role, content, status, usage, created_at_ms"
