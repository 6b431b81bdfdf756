"""A SQLite batch that failed for the disk's sake keeps its durable puts (`retry_puts`): they are
committed once the disk is back, before the writes queued after them, while awaited operations
fail at once and the lane's bound still holds.

The failure is real: a second connection holds an EXCLUSIVE lock on the same file past the
writer's busy_timeout (SQLITE_BUSY), then releases it. No mocks, no sleeps: each step waits on
a future the writer resolves.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from agentos.config import StoreConfig
from agentos.errors import StoreUnavailable
from agentos.store.ops import transient
from agentos.store.records import MessageRecord, MessageRole, SessionRecord
from agentos.store.sqlite import SQLiteStore
from agentos.store.writer import Writer
from tests.store.test_writer import Gate

SCHEMA = """
PRAGMA foreign_keys = ON;
CREATE TABLE IF NOT EXISTS parents (parent_id INTEGER PRIMARY KEY);
CREATE TABLE IF NOT EXISTS rows (
    n INTEGER PRIMARY KEY,
    turn TEXT NOT NULL,
    parent_id INTEGER REFERENCES parents (parent_id) DEFERRABLE INITIALLY DEFERRED
);
"""
INSERT = "INSERT INTO rows (turn) VALUES (?)"
WAIT_S = 5.0  # a bound for "fails fast, never hangs"
BUSY_MS = 20


@contextmanager
def locked(path: Path) -> Iterator[sqlite3.Connection]:
    """Another process's connection holding the file's write lock until the block ends."""
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN EXCLUSIVE")
        yield other
        other.execute("ROLLBACK")
    finally:
        other.close()


def turns(path: Path) -> list[str]:
    with sqlite3.connect(path) as db:
        return [row[0] for row in db.execute("SELECT turn FROM rows ORDER BY n")]


async def started(path: Path, **options: Any) -> Writer:
    writer = Writer("test", path, SCHEMA, busy_timeout_ms=BUSY_MS, **options)
    writer.start()
    return writer


def kept_logged(caplog: pytest.LogCaptureFixture) -> bool:
    return any("durable writes kept" in r.getMessage() and " 0 durable" not in r.getMessage() for r in caplog.records)


def msg(turn: str, role: MessageRole = "user") -> MessageRecord:
    return MessageRecord(tenant_id="default", session_id="s", turn_id=turn, role=role, content=turn)


async def test_a_question_that_met_a_locked_file_is_committed_after_it_before_later_writes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = SQLiteStore(tmp_path, StoreConfig(busy_timeout_ms=BUSY_MS, put_linger_ms=0))
    await store.start()
    try:
        await store.create_session(SessionRecord(tenant_id="default", session_id="s"))
        with caplog.at_level(logging.ERROR, "agentos.store"), locked(tmp_path / "sessions.db"):
            store.add_message(msg("question"))  # fire and forget, as a turn's question
            with pytest.raises(StoreUnavailable):  # awaited during the outage: fails, not held
                await asyncio.wait_for(store.commit_message(msg("refused", "assistant")), WAIT_S)
            assert kept_logged(caplog)  # the question's batch failed, and the question was kept
        store.add_message(msg("after"))
        await asyncio.wait_for(store.commit_message(msg("answer", "assistant")), WAIT_S)
        history = await store.history("default", "s", limit=10)
        assert [m.turn_id for m in history] == ["question", "after", "answer"]
    finally:
        await store.close()


async def test_an_awaited_write_behind_more_kept_puts_than_a_batch_holds_fails_at_once(tmp_path: Path) -> None:
    """Without failing what waits behind them, the writer would retry the first batch of kept
    puts for as long as the lock is held, and the awaited write would hang until then."""
    writer = await started(tmp_path / "w.db", retry_puts=True, batch_max_rows=2)
    try:
        with locked(tmp_path / "w.db"):
            for i in range(5):
                writer.put(INSERT, (f"put-{i}",))
            with pytest.raises(StoreUnavailable):
                await asyncio.wait_for(writer.submit(INSERT, ("awaited",)), WAIT_S)
            assert writer.statistics().queued == 5  # the puts wait, counted in their lane
        assert await asyncio.wait_for(writer.submit(INSERT, ("later",)), WAIT_S) == 1
        assert turns(tmp_path / "w.db") == [*(f"put-{i}" for i in range(5)), "later"]
    finally:
        await writer.close()


async def test_a_lane_full_of_kept_puts_refuses_more_then_frees_up(tmp_path: Path) -> None:
    writer = await started(tmp_path / "w.db", retry_puts=True, queue_max_rows=3)
    try:
        with locked(tmp_path / "w.db"):
            for i in range(3):
                writer.put(INSERT, (f"put-{i}",))
            with pytest.raises(StoreUnavailable):
                await asyncio.wait_for(writer.submit(INSERT, ("awaited",)), WAIT_S)
            with pytest.raises(StoreUnavailable):  # memory stays bounded: no fourth put is queued
                await asyncio.wait_for(writer.wait_space(), WAIT_S)
        await asyncio.wait_for(writer.submit(apply=lambda db: None), WAIT_S)  # tried at once, with the kept puts
        await asyncio.wait_for(writer.wait_space(), WAIT_S)
        assert turns(tmp_path / "w.db") == ["put-0", "put-1", "put-2"]
    finally:
        await writer.close()


@pytest.mark.parametrize(("puts", "stored"), [(3, 3), (5, 3)])
async def test_puts_nobody_paces_are_kept_up_to_the_lanes_bounds(tmp_path: Path, puts: int, stored: int) -> None:
    """The events file's terminal events are durable puts without `wait_space()`: a dead disk
    keeps at most `queue_max_rows + shed_max_rows` of them (here 2 + 1), the oldest."""
    writer = await started(tmp_path / "w.db", retry_puts=True, queue_max_rows=2, shed_max_rows=1)
    try:
        gate = Gate()
        held = await gate.hold(writer)  # the thread waits in the gate: what follows is one batch
        with locked(tmp_path / "w.db"):
            for i in range(puts):
                writer.put(INSERT, (f"put-{i}",))
            awaited = writer.submit(INSERT, ("awaited",))
            gate.open()
            await asyncio.wait_for(held, WAIT_S)
            with pytest.raises(StoreUnavailable):
                await asyncio.wait_for(awaited, WAIT_S)
        await asyncio.wait_for(writer.submit(apply=lambda db: None), WAIT_S)
        assert turns(tmp_path / "w.db") == [f"put-{i}" for i in range(stored)]
        assert writer.statistics().failed_total == 1 + puts - stored  # the awaited one, the dropped puts
    finally:
        await writer.close()


async def test_sheddable_rows_and_writers_without_retry_puts_drop_what_the_disk_failed(tmp_path: Path) -> None:
    kept = await started(tmp_path / "kept.db", retry_puts=True)
    journal = await started(tmp_path / "journal.db")  # the run journal's kind: no retry_puts
    try:
        for writer, path in ((kept, tmp_path / "kept.db"), (journal, tmp_path / "journal.db")):
            with locked(path):
                writer.put(INSERT, ("shed",), sheddable=True)
                writer.put(INSERT, ("durable",))
                with pytest.raises(StoreUnavailable):
                    await asyncio.wait_for(writer.submit(INSERT, ("awaited",)), WAIT_S)
            await asyncio.wait_for(writer.submit(apply=lambda db: None), WAIT_S)
        assert turns(tmp_path / "kept.db") == ["durable"]
        assert turns(tmp_path / "journal.db") == []
    finally:
        await kept.close()
        await journal.close()


@pytest.mark.parametrize(
    "bad",
    [("INSERT INTO rows (turn) VALUES (?)", (None,)), ("INSERT INTO rows (turn, parent_id) VALUES (?, ?)", ("o", 9))],
    ids=["not-null-at-the-statement", "foreign-key-at-commit"],
)
async def test_a_put_that_breaks_a_constraint_fails_once_and_is_not_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, bad: tuple[str, tuple[object, ...]]
) -> None:
    writer = await started(tmp_path / "w.db", retry_puts=True, batch_max_rows=1)  # the put is a batch alone
    try:
        with caplog.at_level(logging.ERROR, "agentos.store"):
            writer.put(*bad)
            await asyncio.wait_for(writer.submit(apply=lambda db: None), WAIT_S)
        assert not kept_logged(caplog)  # a bug, not the disk: retrying it would loop forever
        assert writer.statistics().failed_total == 1 and writer.statistics().queued == 0
        assert await asyncio.wait_for(writer.submit(INSERT, ("next",)), WAIT_S) == 1
        assert turns(tmp_path / "w.db") == ["next"]
    finally:
        await writer.close()


async def test_close_during_an_outage_fails_the_kept_puts_instead_of_waiting(tmp_path: Path) -> None:
    writer = await started(tmp_path / "w.db", retry_puts=True)
    with locked(tmp_path / "w.db"):
        writer.put(INSERT, ("kept",))
        with pytest.raises(StoreUnavailable):
            await asyncio.wait_for(writer.submit(INSERT, ("awaited",)), WAIT_S)
        await asyncio.wait_for(writer.close(), WAIT_S)  # tries once more, then gives up
    assert turns(tmp_path / "w.db") == []


def test_which_sqlite_errors_are_the_disks_and_which_a_bug(tmp_path: Path) -> None:
    """Real errors from real connections, classified by `ops.transient`."""
    path = tmp_path / "c.db"
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)")
    db.execute("INSERT INTO t VALUES (1, 'x'), (2, 'y'), (3, 'z')")
    caught: dict[str, sqlite3.Error] = {}
    with pytest.raises(sqlite3.IntegrityError) as integrity:
        db.execute("INSERT INTO t VALUES (1, 'again')")
    caught["constraint"] = integrity.value
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    db.execute(f"PRAGMA max_page_count = {pages}")  # the database may not grow: SQLITE_FULL
    with pytest.raises(sqlite3.OperationalError) as full:
        db.execute("INSERT INTO t VALUES (4, ?)", ("y" * 100_000,))
    caught["full"] = full.value
    cursor = db.execute("SELECT * FROM t")
    cursor.fetchone()  # a statement of this connection still reads the table (rows are left)...
    with pytest.raises(sqlite3.OperationalError) as self_locked:
        db.execute("DROP TABLE t")  # ...so it cannot drop it: SQLITE_LOCKED, the connection's own doing
    caught["locked"] = self_locked.value
    cursor.close()
    with locked(path):
        other = sqlite3.connect(path, timeout=0.01, isolation_level=None)
        with pytest.raises(sqlite3.OperationalError) as busy:
            other.execute("INSERT INTO t VALUES (5, 'z')")
        caught["busy"] = busy.value
        other.close()
    db.close()
    assert {name: transient(exc) for name, exc in caught.items()} == {
        "constraint": False,
        "full": True,
        "locked": False,
        "busy": True,
    }
