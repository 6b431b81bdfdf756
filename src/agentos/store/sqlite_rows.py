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
    " duration_ms REAL, remote TEXT, key_id TEXT DEFAULT '', trace_id TEXT DEFAULT ''",
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
    """Files made before keys (or traces) existed lack `key_id` (`trace_id`): add it (old rows read '')."""
    columns = {row[1] for row in conn.execute("PRAGMA table_info(access_log)")}
    for column in ("key_id", "trace_id"):
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
