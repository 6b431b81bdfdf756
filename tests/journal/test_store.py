"""RunStore: one writer thread, batched commits, reads ordered after writes, durable across reopen."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import msgspec
import pytest

from agentos.errors import StoreError
from agentos.journal.journal import SCHEMA, Journal
from agentos.journal.run_store import RunStore


async def test_writes_batch_and_reads_see_earlier_writes(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs.db", schema=SCHEMA)
    await store.open()
    journal = Journal()
    for seq in range(1, 201):
        store.write_nowait([journal.event("default", "r1", seq, "token", "{}", 0)])
    await store.write([journal.event("default", "r1", 201, "run.completed", "{}", 0)])
    events = await store.read(lambda db: journal.load_events(db, "default", "r1", 0))
    assert [e.seq for e in events] == list(range(1, 202))
    assert store.statistics().batches < 201  # grouped into fewer transactions
    await store.close()
    reopened = RunStore(tmp_path / "runs.db", schema=SCHEMA)
    await reopened.open()
    assert await reopened.read(lambda db: journal.last_event_seq(db, "r1")) == 201
    await reopened.close()


async def test_payloads_are_stored_once(tmp_path: Path) -> None:
    store = RunStore(None, schema=SCHEMA)
    await store.open()
    journal = Journal()
    big = {"content": "x" * 10_000}
    ops = journal.begin_step("default", "r1", 1, "tool", "started", big, 0) + journal.finish_step(
        "default", "r1", 1, "done", big, 0
    )
    await store.write(ops)
    count = await store.read(lambda db: db.execute("SELECT count(*) FROM payloads").fetchone()[0])
    assert count == 1
    [step] = await store.read(lambda db: journal.load_steps(db, "default", "r1"))
    assert step.input == big and step.output == big and step.status == "done"
    await store.close()


async def test_a_failed_batch_fails_its_waiters_and_the_thread_lives_on() -> None:
    store = RunStore(None, schema=SCHEMA)
    await store.open()
    with pytest.raises(StoreError):
        await store.write([("INSERT INTO nowhere VALUES (1)", ())])
    assert await asyncio.wait_for(store.read(lambda db: db.execute("SELECT 1").fetchone()[0]), 5) == 1
    await store.close()


async def test_a_failing_write_fails_alone_and_other_runs_rows_commit() -> None:
    """Defect 3 in runs.db: one bad write used to roll back every run's rows of its batch."""
    store = RunStore(None, schema=SCHEMA)
    await store.open()
    journal = Journal()
    entered, opened = threading.Event(), threading.Event()

    def gate(db: sqlite3.Connection) -> None:  # holds the thread so the writes below share one batch
        entered.set()
        opened.wait(5)

    held = asyncio.ensure_future(store.read(gate))
    assert await asyncio.to_thread(entered.wait, 5)
    store.write_nowait([journal.event("default", "r1", 1, "token", "{}", 0)])
    failing = [journal.event("default", "r2", 1, "token", "{}", 0), ("INSERT INTO nowhere VALUES (1)", ())]
    bad = asyncio.ensure_future(store.write(failing))
    good = asyncio.ensure_future(store.write([journal.event("default", "r3", 1, "token", "{}", 0)]))
    opened.set()
    await asyncio.wait_for(held, 5)
    with pytest.raises(StoreError):
        await asyncio.wait_for(bad, 5)
    await asyncio.wait_for(good, 5)
    runs = await store.read(lambda db: [r[0] for r in db.execute("SELECT run_id FROM run_events ORDER BY run_id")])
    assert runs == ["r1", "r3"]  # r2's first statement went with its failing second one
    await store.close()


async def test_a_reader_that_raises_gets_a_store_error_and_the_thread_lives_on() -> None:
    store = RunStore(None, schema=SCHEMA)
    await store.open()
    with pytest.raises(StoreError) as caught:
        await asyncio.wait_for(store.read(lambda db: msgspec.json.decode(b"{bad")), 5)
    assert isinstance(caught.value.__cause__, msgspec.DecodeError)
    assert await asyncio.wait_for(store.read(lambda db: db.execute("SELECT 1").fetchone()[0]), 5) == 1
    await store.close()
