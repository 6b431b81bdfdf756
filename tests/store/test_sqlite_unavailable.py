"""A SQLite file that is not the request's fault: locked past busy_timeout -> `StoreUnavailable`
(503), and the writer goes on once the lock is gone; a bad statement stays a `StoreError` (500).

A real lock, held by a second connection to the same file: no mocks.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from agentos.errors import StoreError, StoreUnavailable
from agentos.store.writer import Writer

SCHEMA = "CREATE TABLE IF NOT EXISTS rows (turn TEXT PRIMARY KEY);"
INSERT = "INSERT INTO rows (turn) VALUES (?)"
WAIT_S = 5.0


async def test_a_file_locked_past_busy_timeout_is_unavailable_then_works_again(tmp_path: Path) -> None:
    path = tmp_path / "locked.db"
    writer = Writer("test", path, SCHEMA, busy_timeout_ms=20)
    writer.start()
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN EXCLUSIVE")  # another process holds the file
        with pytest.raises(StoreUnavailable) as caught:
            await asyncio.wait_for(writer.submit(INSERT, ("locked",)), WAIT_S)
        assert isinstance(caught.value.__cause__, sqlite3.OperationalError)
        other.execute("ROLLBACK")
        assert await asyncio.wait_for(writer.submit(INSERT, ("free",)), WAIT_S) == 1
    finally:
        other.close()
        await writer.close()


async def test_a_bad_statement_is_a_store_error_not_unavailable(tmp_path: Path) -> None:
    writer = Writer("test", tmp_path / "bug.db", SCHEMA)
    writer.start()
    try:
        with pytest.raises(StoreError) as caught:
            await asyncio.wait_for(writer.submit("INSERT INTO no_such_table VALUES (1)", ()), WAIT_S)
        assert not isinstance(caught.value, StoreUnavailable)  # a bug: 500 with an error_id
    finally:
        await writer.close()
