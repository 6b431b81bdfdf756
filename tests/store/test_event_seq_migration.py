"""An events.db made before resumable turn streams gains the `seq` column when the store opens it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from agentos.config import StoreConfig
from agentos.store.records import EventRecord
from agentos.store.sqlite import SQLiteStore

_OLD_SCHEMA = """
CREATE TABLE events (
    event_id INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    type TEXT NOT NULL,
    data TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL
);
INSERT INTO events (tenant_id, session_id, turn_id, type, data, created_at_ms)
VALUES ('default', 's', 't', 'turn.started', '{}', 1);
"""


async def test_an_old_events_file_is_migrated_and_keeps_its_rows(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "events.db")
    conn.executescript(_OLD_SCHEMA)
    conn.close()
    for _ in range(2):  # a second open finds the column: no second ALTER
        store = SQLiteStore(tmp_path, StoreConfig())
        await store.start()
        try:
            old = await store.list_turn_events("default", "s", "t", after_seq=-1, limit=10)
            assert [(e.type, e.seq) for e in old][:1] == [("turn.started", 0)]  # an old row reads seq 0
        finally:
            await store.close()
    store = SQLiteStore(tmp_path, StoreConfig())
    await store.start()
    try:
        store.add_event(
            EventRecord(tenant_id="default", session_id="s", turn_id="t", type="turn.completed", data={}, seq=7)
        )
        events = await store.list_turn_events("default", "s", "t", after_seq=0, limit=10)
        assert [(e.type, e.seq) for e in events] == [("turn.completed", 7)]
    finally:
        await store.close()
    conn = sqlite3.connect(tmp_path / "events.db")
    try:
        indexes = {row[1] for row in conn.execute("PRAGMA index_list(events)")}
    finally:
        conn.close()
    assert "events_by_turn" in indexes
