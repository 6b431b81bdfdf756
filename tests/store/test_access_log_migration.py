"""An access.db made before API keys gains the key_id (and later subject) column when the store opens it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from agentos.config import StoreConfig
from agentos.store.records import AccessRecord
from agentos.store.sqlite import SQLiteStore

_OLD_SCHEMA = """
CREATE TABLE access_log (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id TEXT NOT NULL,
    ts_ms INTEGER NOT NULL,
    method TEXT NOT NULL,
    path TEXT NOT NULL,
    status INTEGER NOT NULL,
    duration_ms REAL NOT NULL,
    remote TEXT NOT NULL
);
INSERT INTO access_log (tenant_id, ts_ms, method, path, status, duration_ms, remote)
VALUES ('default', 1, 'GET', '/old', 200, 1.0, '');
"""


def _make_old_file(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.executescript(_OLD_SCHEMA)
    conn.close()


def _rows(path: Path) -> list[tuple[str, str, str, str]]:
    conn = sqlite3.connect(path)
    try:
        return list(conn.execute("SELECT path, tenant_id, key_id, subject FROM access_log ORDER BY id"))
    finally:
        conn.close()


async def test_an_old_access_log_is_migrated_and_keeps_its_rows(tmp_path: Path) -> None:
    _make_old_file(tmp_path / "access.db")
    store = SQLiteStore(tmp_path, StoreConfig())
    await store.start()
    store.log_access(AccessRecord(ts_ms=2, method="GET", path="/new", status=200, duration_ms=1.0, remote=""))
    store.log_access(AccessRecord(ts_ms=3, method="GET", path="/k", status=401, duration_ms=1, remote="", key_id="k1"))
    store.log_access(
        AccessRecord(ts_ms=4, method="GET", path="/u", status=200, duration_ms=1, remote="", subject="bob")
    )
    await store.close()
    assert _rows(tmp_path / "access.db") == [
        ("/old", "default", "", ""),
        ("/new", "default", "", ""),
        ("/k", "default", "k1", ""),
        ("/u", "default", "", "bob"),
    ]
    reopened = SQLiteStore(tmp_path, StoreConfig())  # a second open finds the column: no second ALTER
    await reopened.start()
    await reopened.close()
