"""The one writer thread: per-operation failure, commit retry, a death that hangs nothing, lanes.

Each test holds the thread inside a `Gate` operation while it queues the operations under
test, so that they land in one batch deterministically: no sleeps, no timing guesses.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from agentos.errors import NotFound, StoreError, StoreUnavailable
from agentos.store.writer import Writer

SCHEMA = """
PRAGMA foreign_keys = ON;
CREATE TABLE IF NOT EXISTS parents (parent_id INTEGER PRIMARY KEY);
CREATE TABLE IF NOT EXISTS rows (
    turn TEXT PRIMARY KEY,
    parent_id INTEGER REFERENCES parents (parent_id) DEFERRABLE INITIALLY DEFERRED
);
"""
INSERT = "INSERT INTO rows (turn) VALUES (?)"
WAIT_S = 5.0  # a bound for "never hangs": the old writer's futures hung forever here


class Gate:
    """An operation that holds the writer thread until the test opens it."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.opened = threading.Event()

    def __call__(self, db: sqlite3.Connection) -> None:
        self.entered.set()
        self.opened.wait(WAIT_S)

    async def hold(self, writer: Writer) -> asyncio.Future[Any]:
        future = writer.submit(apply=self)
        assert await asyncio.to_thread(self.entered.wait, WAIT_S), "the writer never ran the gate"
        return future

    def open(self) -> None:
        self.opened.set()


class _Fatal(BaseException):
    """Stands for what `except Exception` does not catch (KeyboardInterrupt, SystemExit)."""


@pytest.fixture
async def writer(tmp_path: Path) -> AsyncIterator[Writer]:
    w = Writer("test", tmp_path / "test.db", SCHEMA)
    w.start()
    yield w
    await w.close()


def turns(path: Path) -> list[str]:
    with sqlite3.connect(path) as db:
        return sorted(row[0] for row in db.execute("SELECT turn FROM rows"))


def decode_error_reader(db: sqlite3.Connection) -> Any:
    return msgspec.json.decode(b"{not json")  # a corrupt row read back


@pytest.mark.parametrize(
    "bad",
    [
        {"apply": decode_error_reader},
        {"sql": "INSERT INTO nowhere VALUES (?)", "params": (1,)},
    ],
    ids=["decode-error-in-a-reader", "sqlite-error"],
)
async def test_an_operation_that_raises_fails_alone_and_the_rest_of_its_batch_commits(
    writer: Writer, tmp_path: Path, bad: dict[str, Any]
) -> None:
    gate = Gate()
    held = await gate.hold(writer)
    writer.put(INSERT, ("turn-a",))
    failing = writer.submit(**bad)
    other = writer.submit(INSERT, ("turn-b",))
    gate.open()
    await asyncio.wait_for(held, WAIT_S)
    with pytest.raises(StoreError) as caught:
        await asyncio.wait_for(failing, WAIT_S)
    assert isinstance(caught.value.__cause__, msgspec.DecodeError | sqlite3.Error)
    assert await asyncio.wait_for(other, WAIT_S) == 1
    assert await asyncio.wait_for(writer.submit(apply=lambda db: 42), WAIT_S) == 42  # the thread lives on
    assert turns(tmp_path / "test.db") == ["turn-a", "turn-b"]
    assert writer.statistics().failed_total == 1


async def test_our_own_errors_from_a_reader_pass_unchanged(writer: Writer) -> None:
    def reader(db: sqlite3.Connection) -> None:
        raise NotFound("run 'r1' not found")

    with pytest.raises(NotFound):
        await asyncio.wait_for(writer.submit(apply=reader), WAIT_S)


async def test_a_failed_commit_is_retried_once_and_the_repeat_duplicates_nothing(
    writer: Writer, tmp_path: Path
) -> None:
    calls = 0

    def flaky(db: sqlite3.Connection) -> str:
        nonlocal calls
        calls += 1
        parent = 999 if calls == 1 else None  # the first COMMIT fails its deferred foreign key
        db.execute("INSERT INTO rows VALUES (?, ?)", ("turn-flaky", parent))
        return "ok"

    gate = Gate()
    held = await gate.hold(writer)
    writer.put(INSERT, ("turn-a",))
    flaky_future = writer.submit(apply=flaky)
    other = writer.submit(INSERT, ("turn-b",))
    gate.open()
    await asyncio.wait_for(held, WAIT_S)
    assert await asyncio.wait_for(flaky_future, WAIT_S) == "ok"
    assert await asyncio.wait_for(other, WAIT_S) == 1
    assert calls == 2
    assert turns(tmp_path / "test.db") == ["turn-a", "turn-b", "turn-flaky"]
    assert writer.statistics().retried_total == 1


async def test_a_commit_that_fails_twice_fails_every_future_of_its_batch(writer: Writer, tmp_path: Path) -> None:
    gate = Gate()
    held = await gate.hold(writer)
    orphan = writer.submit("INSERT INTO rows VALUES (?, ?)", ("turn-orphan", 999))  # fails at COMMIT, always
    other = writer.submit(INSERT, ("turn-b",))
    gate.open()
    await asyncio.wait_for(held, WAIT_S)
    for future in (orphan, other):
        with pytest.raises(StoreError) as caught:
            await asyncio.wait_for(future, WAIT_S)
        assert isinstance(caught.value.__cause__, sqlite3.IntegrityError)
    # explicitly failed, not half-applied, and the writer goes on
    assert await asyncio.wait_for(writer.submit(INSERT, ("turn-c",)), WAIT_S) == 1
    assert turns(tmp_path / "test.db") == ["turn-c"]


async def test_a_writer_killed_by_a_base_exception_fails_everything_and_refuses_the_rest(tmp_path: Path) -> None:
    writer = Writer("test", tmp_path / "test.db", SCHEMA, queue_max_rows=1)

    def fatal(db: sqlite3.Connection) -> None:
        raise _Fatal("killed")

    writer.start()
    gate = Gate()
    held = await gate.hold(writer)
    killer = writer.submit(apply=fatal)
    behind = writer.submit(INSERT, ("turn-b",))
    space = asyncio.create_task(writer.wait_space())  # the durable lane is over its bound of 1
    gate.open()
    await asyncio.wait_for(held, WAIT_S)
    for future in (killer, behind):  # unavailable (503), not a bug of the caller's
        with pytest.raises(StoreUnavailable):
            await asyncio.wait_for(future, WAIT_S)
    with pytest.raises(StoreUnavailable):
        await asyncio.wait_for(space, WAIT_S)  # a waiter for space is woken with the error, not left blocked
    with pytest.raises(StoreUnavailable):
        writer.submit(apply=lambda db: None)
    with pytest.raises(StoreUnavailable):
        writer.put(INSERT, ("turn-c",))
    with pytest.raises(StoreUnavailable):
        writer.check()  # what /readyz asks
    assert writer.put(INSERT, ("turn-d",), sheddable=True) is False  # sheddable: dropped and counted
    with pytest.raises(StoreError):
        await asyncio.wait_for(writer.wait_space(), WAIT_S)
    await asyncio.wait_for(writer.close(), WAIT_S)
    assert turns(tmp_path / "test.db") == []


async def test_the_lanes_have_their_own_bounds(tmp_path: Path) -> None:
    writer = Writer("test", tmp_path / "test.db", SCHEMA, queue_max_rows=2, shed_max_rows=3)
    writer.start()
    gate = Gate()
    held = await gate.hold(writer)  # the gate itself holds one durable place
    accepted = [writer.put(INSERT, (f"shed-{i}",), sheddable=True) for i in range(10)]
    assert accepted == [True] * 3 + [False] * 7
    await asyncio.wait_for(writer.wait_space(), WAIT_S)  # a full sheddable lane does not hold durable writes
    writer.put(INSERT, ("durable",))
    waiter = asyncio.create_task(writer.wait_space())
    await asyncio.sleep(0)  # let the waiter run up to its wait
    assert not waiter.done()
    gate.open()
    await asyncio.wait_for(held, WAIT_S)
    await asyncio.wait_for(waiter, WAIT_S)
    stats = writer.statistics()
    await writer.close()
    assert stats.dropped_total == 7
    assert turns(tmp_path / "test.db") == ["durable", "shed-0", "shed-1", "shed-2"]


async def test_close_applies_everything_queued_then_refuses(tmp_path: Path) -> None:
    writer = Writer("test", tmp_path / "test.db", SCHEMA)
    writer.start()
    for i in range(500):
        writer.put(INSERT, (f"turn-{i:03}",))
    closing = asyncio.create_task(writer.close())
    await asyncio.sleep(0)  # close() has begun
    with pytest.raises(StoreError):
        writer.put(INSERT, ("late",))
    await asyncio.wait_for(closing, WAIT_S)
    assert turns(tmp_path / "test.db") == [f"turn-{i:03}" for i in range(500)]


async def test_a_read_sees_every_write_queued_before_it(writer: Writer) -> None:
    for i in range(100):
        writer.put(INSERT, (f"turn-{i:03}",))
    count = await writer.submit(apply=lambda db: db.execute("SELECT count(*) FROM rows").fetchone()[0])
    assert count == 100


async def test_an_unusable_file_fails_at_start_with_a_store_error(tmp_path: Path) -> None:
    (tmp_path / "dir.db").mkdir()
    with pytest.raises(StoreError):
        Writer("test", tmp_path / "dir.db", SCHEMA).start()


async def test_a_read_never_waits_for_a_busy_writers_batch_to_fill(tmp_path: Path) -> None:
    """With a linger far longer than the test, a read still returns, and sees the write queued
    before it (its batch, with that write, is committed at once)."""
    writer = Writer("test", tmp_path / "test.db", SCHEMA, linger_ms=600_000)
    writer.start()
    try:
        await writer.submit("INSERT INTO rows (turn) VALUES (?)", ("a",))  # idle: at once; now busy
        writer.put("INSERT INTO rows (turn) VALUES (?)", ("b",))  # lingers
        count = await asyncio.wait_for(writer.read(lambda db: db.execute("SELECT count(*) FROM rows").fetchone()[0]), 5)
        assert count == 2
    finally:
        await writer.close()
