"""Turn events as rows, shared by the SQLite and PostgreSQL stores (the same columns in both)."""

from __future__ import annotations

import sqlite3
from typing import Any

import msgspec

from agentos.store.records import EventRecord

EVENT_COLUMNS = "event_id, tenant_id, session_id, turn_id, type, data, created_at_ms, seq"

_decode = msgspec.json.decode


def event_from_row(row: Any) -> EventRecord:
    e, t, s, u, k, d, c, q = row
    return EventRecord(
        event_id=e, tenant_id=t, session_id=s, turn_id=u, type=k, data=_decode(d), created_at_ms=c, seq=q
    )


def migrate_sqlite_events(conn: sqlite3.Connection) -> None:
    """Files made before resumable turn streams lack `seq`: add it (old rows read 0) and the
    index a resumed stream reads by."""
    columns = {row[1] for row in conn.execute("PRAGMA table_info(events)")}
    if "seq" not in columns:
        conn.execute("ALTER TABLE events ADD COLUMN seq INTEGER NOT NULL DEFAULT 0")
    conn.execute("CREATE INDEX IF NOT EXISTS events_by_turn ON events (tenant_id, turn_id, seq)")
