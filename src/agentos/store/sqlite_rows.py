"""The rows of the SQLite session store: its tables (created, or migrated, when a file is opened),
and its insert statements (`agentos.store.sqlite` runs them; the rows and records convert in
`agentos.store.rows`)."""

from __future__ import annotations

import sqlite3

SESSIONS_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    agent TEXT NOT NULL,
    metadata TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    on_busy TEXT
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
    key_id TEXT NOT NULL DEFAULT '',
    trace_id TEXT NOT NULL DEFAULT ''
);
"""


def migrate_sessions(conn: sqlite3.Connection) -> None:
    """Files made before `on_busy` lack the column: add it (old sessions read NULL: the default)."""
    columns = {row[1] for row in conn.execute("PRAGMA table_info(sessions)")}
    if "on_busy" not in columns:
        conn.execute("ALTER TABLE sessions ADD COLUMN on_busy TEXT")


def migrate_access(conn: sqlite3.Connection) -> None:
    """Files made before keys (or traces) existed lack `key_id` (`trace_id`): add it (old rows read '')."""
    columns = {row[1] for row in conn.execute("PRAGMA table_info(access_log)")}
    for column in ("key_id", "trace_id"):
        if column not in columns:
            conn.execute(f"ALTER TABLE access_log ADD COLUMN {column} TEXT NOT NULL DEFAULT ''")


# A writer retry may repeat a batch (after a COMMIT that reported failure), so writes with a
# natural key are idempotent. Events and access rows have none; they are sheddable anyway.
INSERT_SESSION = (
    "INSERT INTO sessions (session_id, tenant_id, agent, metadata, created_at_ms, on_busy)"
    " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (session_id) DO NOTHING"
)
# Upsert: a turn has one message per role.
INSERT_MESSAGE = """
INSERT INTO messages (tenant_id, session_id, turn_id, role, content, status, usage, created_at_ms)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (turn_id, role) DO UPDATE SET content = excluded.content, status = excluded.status, usage = excluded.usage
"""
INSERT_ACCESS = (
    "INSERT INTO access_log (tenant_id, ts_ms, method, path, status, duration_ms, remote, key_id, trace_id)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
