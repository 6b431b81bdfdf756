"""An idle writer lets the writes nobody awaits (`put`) wait `put_linger_ms` for company (one
wake-up, one commit for many turns' access rows, events and messages); a `submit` wakes it at
once and takes them along."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from agentos.store.writer import Writer

SCHEMA = "CREATE TABLE IF NOT EXISTS rows (turn TEXT PRIMARY KEY);"
INSERT = "INSERT INTO rows (turn) VALUES (?)"
WAIT_S = 5.0


def turns(path: Path) -> list[str]:
    with sqlite3.connect(path) as db:
        return sorted(row[0] for row in db.execute("SELECT turn FROM rows"))


async def parked(writer: Writer) -> None:
    """Until the thread has gone to sleep with nothing pending (it parks right after a batch).
    Parking sets no event (that would cost the hot path a wake-up), so this looks, bounded."""
    await writer.submit(apply=lambda db: None)
    async with asyncio.timeout(WAIT_S):
        while not writer.parked:  # noqa: ASYNC110 - a plain flag of the thread's, no event to await
            await asyncio.sleep(0.001)


async def test_puts_on_an_idle_writer_share_one_commit_after_the_linger(tmp_path: Path) -> None:
    batches: list[tuple[int, float]] = []
    done = asyncio.Event()

    def on_batch(rows: int, wait_ms: float) -> None:
        batches.append((rows, wait_ms))
        done.set()

    writer = Writer("test", tmp_path / "test.db", SCHEMA, put_linger_ms=100, on_batch=on_batch)
    writer.start()
    await parked(writer)
    batches.clear()
    done.clear()
    for i in range(3):
        assert writer.put(INSERT, (f"shed-{i}",), sheddable=True)
    writer.put(INSERT, ("durable",))  # never shed, but nobody awaits it either
    await asyncio.wait_for(done.wait(), WAIT_S)
    await writer.close()
    assert len(batches) == 1
    rows, wait_ms = batches[0]
    assert rows == 4
    assert wait_ms >= 80  # the first row waited for the linger, not for nothing
    assert turns(tmp_path / "test.db") == ["durable", "shed-0", "shed-1", "shed-2"]


async def test_a_submit_wakes_the_writer_at_once_and_takes_the_waiting_puts_along(tmp_path: Path) -> None:
    writer = Writer("test", tmp_path / "test.db", SCHEMA, put_linger_ms=600_000)
    writer.start()
    await parked(writer)
    for i in range(3):
        writer.put(INSERT, (f"shed-{i}",), sheddable=True)
    writer.put(INSERT, ("durable",))
    read = writer.submit(apply=lambda db: db.execute("SELECT count(*) FROM rows").fetchone()[0])
    count = await asyncio.wait_for(read, WAIT_S)  # not ten minutes later
    await writer.close()
    assert count == 4  # the read saw every write queued before it


async def test_close_commits_the_puts_still_waiting(tmp_path: Path) -> None:
    writer = Writer("test", tmp_path / "test.db", SCHEMA, put_linger_ms=600_000)
    writer.start()
    await parked(writer)
    writer.put(INSERT, ("shed",), sheddable=True)
    writer.put(INSERT, ("durable",))
    await asyncio.wait_for(writer.close(), WAIT_S)
    assert turns(tmp_path / "test.db") == ["durable", "shed"]
