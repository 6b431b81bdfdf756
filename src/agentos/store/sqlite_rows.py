"""The rows of the SQLite session store: its tables (created, or migrated, when a file is opened),
and its insert statements (`agentos.store.sqlite` runs them; the rows and records convert in
`agentos.store.rows`)."""

from __future__ import annotations

import sqlite3

from agentos.store.sqlite_table import Table, script

SESSIONS = Table(
    "sessions",
    "session_id TEXT PRIMARY KEY, tenant_id TEXT, agent TEXT, metadata TEXT, created_at_ms INTEGER, on_busy TEXT,"
    " owner TEXT",
    nullable=("on_busy", "owner"),  # on_busy NULL: its agent's, else replace; owner NULL: a tenant key's
    indexes=("sessions_by_tenant (tenant_id, session_id)",),
)
MESSAGES = Table(
    "messages",
    "message_id INTEGER PRIMARY KEY AUTOINCREMENT, tenant_id TEXT, session_id TEXT, turn_id TEXT, role TEXT,"
    " content TEXT, status TEXT, usage TEXT, created_at_ms INTEGER",
    nullable=("usage",),
    constraints=("UNIQUE (turn_id, role)",),
    indexes=("messages_by_tenant (tenant_id, session_id, message_id)",),
)
EVENTS = Table(
    "events",
    "event_id INTEGER PRIMARY KEY AUTOINCREMENT, tenant_id TEXT, session_id TEXT, turn_id TEXT, type TEXT,"
    " data TEXT, created_at_ms INTEGER",
    indexes=("events_by_tenant (tenant_id, session_id, event_id)",),
)
ACCESS_LOG = Table(
    "access_log",
    "id INTEGER PRIMARY KEY AUTOINCREMENT, tenant_id TEXT, ts_ms INTEGER, method TEXT, path TEXT, status INTEGER,"
    " duration_ms REAL, remote TEXT, key_id TEXT DEFAULT '', trace_id TEXT DEFAULT '', subject TEXT DEFAULT ''",
    indexes=("access_by_tenant_time (tenant_id, ts_ms)",),  # retention deletes the oldest rows
)
SESSIONS_SCHEMA = script(SESSIONS, MESSAGES, "DROP INDEX IF EXISTS messages_by_session;")
EVENTS_SCHEMA = script(EVENTS, "DROP INDEX IF EXISTS events_by_session;")
ACCESS_SCHEMA = script(ACCESS_LOG)


def migrate_sessions(conn: sqlite3.Connection) -> None:
    """Files made before `on_busy` (`owner`) lack the column: add it (old sessions read NULL: the
    default, and made by a tenant key)."""
    columns = {row[1] for row in conn.execute("PRAGMA table_info(sessions)")}
    for column in ("on_busy", "owner"):
        if column not in columns:
            conn.execute(f"ALTER TABLE sessions ADD COLUMN {column} TEXT")


def migrate_access(conn: sqlite3.Connection) -> None:
    """Files made before keys (traces, end users) existed lack `key_id` (`trace_id`, `subject`):
    add it (old rows read '')."""
    columns = {row[1] for row in conn.execute("PRAGMA table_info(access_log)")}
    for column in ("key_id", "trace_id", "subject"):
        if column not in columns:
            conn.execute(f"ALTER TABLE access_log ADD COLUMN {column} TEXT NOT NULL DEFAULT ''")


# A writer retry may repeat a batch (after a COMMIT that reported failure), so writes with a
# natural key are idempotent. Events and access rows have none; they are sheddable anyway.
INSERT_SESSION = SESSIONS.insert() + " ON CONFLICT (session_id) DO NOTHING"
# Upsert: a turn has one message per role.
INSERT_MESSAGE = MESSAGES.insert(generated=("message_id",)) + (
    " ON CONFLICT (turn_id, role) DO UPDATE SET content = excluded.content, status = excluded.status,"
    " usage = excluded.usage"
)
INSERT_ACCESS = ACCESS_LOG.insert(generated=("id",))

# A session's deletion (`SQLiteStore.delete_session`); the access rows by `records.access_params`.
DELETE_SESSION = "DELETE FROM sessions WHERE tenant_id = ? AND session_id = ?"
DELETE_SESSION_EVENTS = "DELETE FROM events WHERE tenant_id = ? AND session_id = ?"
DELETE_BATCH_ROWS = 500  # a long session's rows go this many per transaction (`[retention] batch_rows`' default)
DELETE_SESSION_MESSAGES_BATCH = (
    "DELETE FROM messages WHERE message_id IN"
    " (SELECT message_id FROM messages WHERE tenant_id = ? AND session_id = ? LIMIT ?)"
)
DELETE_SESSION_EVENTS_BATCH = (
    "DELETE FROM events WHERE event_id IN (SELECT event_id FROM events WHERE tenant_id = ? AND session_id = ? LIMIT ?)"
)
DELETE_SESSION_ACCESS = "DELETE FROM access_log WHERE tenant_id = ? AND (path = ? OR (path >= ? AND path < ?))"

# Retention (`agentos.runtime.retention`): a page of sessions with whether each is idle, and the
# oldest rows of a tenant, `LIMIT` at a time (on the indexes led by tenant and time).
IDLE_SESSIONS = (
    "SELECT s.session_id, s.created_at_ms < ?2 AND NOT EXISTS (SELECT 1 FROM messages m"
    " WHERE m.tenant_id = s.tenant_id AND m.session_id = s.session_id AND m.created_at_ms >= ?2)"
    " FROM sessions s WHERE s.tenant_id = ?1 AND s.session_id > ?3 ORDER BY s.session_id LIMIT ?4"
)
EXPIRE_ACCESS = (
    "DELETE FROM access_log WHERE id IN"
    " (SELECT id FROM access_log WHERE tenant_id = ? AND ts_ms < ? ORDER BY ts_ms LIMIT ?)"
)
EXPIRE_USAGE = (
    "DELETE FROM usage_ledger WHERE rowid IN"
    " (SELECT rowid FROM usage_ledger WHERE tenant_id = ? AND at_ms < ? ORDER BY at_ms LIMIT ?)"
)
