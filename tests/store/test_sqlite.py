"""SQLiteStore behaviour beyond the shared contract: damaged rows, and deletion that reaches every file."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from agentos.config import StoreConfig
from agentos.errors import StoreError
from agentos.store.records import EventRecord, MessageRecord, SessionRecord
from agentos.store.sqlite import SQLiteStore

WAIT_S = 5.0  # a bound for "never hangs": the old writer thread died here and every later read hung


async def test_a_damaged_row_fails_its_read_and_the_store_goes_on(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path, StoreConfig())
    await store.start()
    for sid in ("s", "t"):
        await store.create_session(SessionRecord(tenant_id="default", session_id=sid))
        await store.commit_message(
            MessageRecord(tenant_id="default", session_id=sid, turn_id=f"{sid}1", role="user", content="hi")
        )
    with sqlite3.connect(tmp_path / "sessions.db") as db:  # what a torn write or a bad migration leaves
        db.execute("UPDATE messages SET usage = '{not json' WHERE session_id = 's'")
    with pytest.raises(StoreError):
        await asyncio.wait_for(store.history("default", "s", limit=10), WAIT_S)
    store.add_message(MessageRecord(tenant_id="default", session_id="t", turn_id="t2", role="user", content="again"))
    history = await asyncio.wait_for(store.history("default", "t", limit=10), WAIT_S)
    assert [m.content for m in history] == ["hi", "again"]
    await asyncio.wait_for(store.wait_space(), WAIT_S)
    await store.close()


async def test_deleting_a_session_removes_its_jsonl_lines_and_its_queued_events(tmp_path: Path) -> None:
    jsonl = tmp_path / "jsonl"
    store = SQLiteStore(tmp_path / "data", StoreConfig(), jsonl_dir=str(jsonl))
    await store.start()
    for sid in ("ses_gone", "ses_kept"):
        await store.create_session(SessionRecord(tenant_id="default", session_id=sid))
        store.add_event(
            EventRecord(tenant_id="default", session_id=sid, turn_id="t", type="turn.started", data={"n": 1})
        )
    await store.list_events("default", "ses_gone", after=0, limit=10)  # the first events are on disk
    (jsonl / "notes.txt").write_text("ses_gone: not a log file, not ours")
    for sid in ("ses_gone", "ses_kept"):  # queued, not awaited: the deletion is ordered after them
        store.add_event(
            EventRecord(tenant_id="default", session_id=sid, turn_id="t", type="turn.completed", data={"n": 2})
        )
    assert await store.delete_session("default", "ses_gone") is True
    assert await store.list_events("default", "ses_gone", after=0, limit=10) == []
    assert len(await store.list_events("default", "ses_kept", after=0, limit=10)) == 2
    await store.close()
    lines = b"".join(p.read_bytes() for p in jsonl.glob("*.jsonl")).decode().splitlines()
    assert len(lines) == 2 and all("ses_kept" in line for line in lines)
    assert (jsonl / "notes.txt").read_text().startswith("ses_gone")  # only the event log is rewritten
    assert [p.name for p in jsonl.iterdir() if p.suffix == ".tmp"] == []
    with sqlite3.connect(tmp_path / "data" / "events.db") as db:
        assert db.execute("SELECT count(*) FROM events WHERE session_id = 'ses_gone'").fetchone()[0] == 0


async def test_a_deletion_does_not_wait_for_another_process_reading_the_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The WAL truncation after a deletion skips (with a warning) while a reader of another
    connection (a backup tool) holds a snapshot: it never waits the busy timeout out."""
    store = SQLiteStore(tmp_path, StoreConfig(busy_timeout_ms=60_000))
    await store.start()
    for session_id in ("ses_a", "ses_b"):
        await store.create_session(SessionRecord(tenant_id="default", session_id=session_id))
        await store.commit_message(
            MessageRecord(
                tenant_id="default", session_id=session_id, turn_id=f"t-{session_id}", role="user", content="x"
            )
        )
    reader = sqlite3.connect(tmp_path / "sessions.db", isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM messages").fetchone()  # holds its snapshot
    await store.commit_message(  # a frame the reader does not see: a checkpoint must wait for it
        MessageRecord(tenant_id="default", session_id="ses_b", turn_id="t-new", role="user", content="y")
    )
    try:
        async with asyncio.timeout(20.0):  # far below busy_timeout_ms, far above a loaded machine's delete
            assert await store.delete_session("default", "ses_a") is True
    finally:
        reader.execute("COMMIT")
        reader.close()
    assert "WAL after a deletion was not truncated" in caplog.text
    assert await store.get_session("default", "ses_a") is None
    await store.close()
