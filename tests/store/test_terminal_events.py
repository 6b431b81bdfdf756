"""A turn's terminal event is never shed, and a completed turn's is stored with its answer
(`Store.commit_answer`), on SQLite and PostgreSQL, while the event lane sheds everything else."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest

from agentos.config import StoreConfig
from agentos.errors import StaleTurn
from agentos.store.base import Store
from agentos.store.records import EventRecord, MessageRecord, SessionRecord
from agentos.store.sqlite import SQLiteStore
from tests.postgres import fresh_schema

T, S = "default", "s"
TURNS = 40


@pytest.fixture(params=["sqlite", "postgres"])
async def small_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """A store whose event lane holds 5 rows: a flood of events sheds most of them."""
    if request.param == "sqlite":
        store: Store = SQLiteStore(tmp_path, StoreConfig(queue_max_rows=5))
        await store.start()
        yield store
        await store.close()
        return
    from agentos.store.postgres import PostgresStore

    async for config in fresh_schema():
        pg = PostgresStore(msgspec.structs.replace(config, queue_max_rows=5))
        await pg.start()
        yield pg
        await pg.close()


def answer(turn_id: str) -> MessageRecord:
    return MessageRecord(tenant_id=T, session_id=S, turn_id=turn_id, role="assistant", content=f"answer {turn_id}")


def event(turn_id: str, kind: str, seq: int = 1) -> EventRecord:
    return EventRecord(tenant_id=T, session_id=S, turn_id=turn_id, type=kind, data={"turn_id": turn_id}, seq=seq)


async def test_terminal_events_survive_a_shedding_event_lane(small_store: Store) -> None:
    store = small_store
    await store.create_session(SessionRecord(tenant_id=T, session_id=S))
    commits = []
    for i in range(TURNS):
        for n in range(20):  # far over the lane's 5 rows: shed
            store.add_event(event(f"done_{i}", "token", seq=n + 1))
        commits.append(store.commit_answer(answer(f"done_{i}"), event(f"done_{i}", "turn.completed", seq=30)))
        store.add_event(event(f"failed_{i}", "turn.failed"), durable=True)
    await asyncio.gather(*commits)
    assert store.statistics().events_dropped_total > 0  # the lane did shed
    events = await store.list_events(T, S, after=0, limit=100_000)
    terminal = {(e.turn_id, e.type) for e in events if e.type != "token"}
    assert terminal == {(f"done_{i}", "turn.completed") for i in range(TURNS)} | {
        (f"failed_{i}", "turn.failed") for i in range(TURNS)
    }
    answers = await store.list_messages(T, S, after=0, limit=1000)
    assert sorted(m.turn_id for m in answers) == sorted(f"done_{i}" for i in range(TURNS))
    # a resumed stream of one turn reads its terminal event too
    assert [e.type for e in await store.list_turn_events(T, S, "done_7", after_seq=29, limit=10)] == ["turn.completed"]


async def test_a_superseded_turn_stores_neither_its_answer_nor_its_event() -> None:
    from agentos.store.postgres import PostgresStore

    async for config in fresh_schema():
        a, b = PostgresStore(config), PostgresStore(config)
        await a.start()
        await b.start()
        try:
            await a.create_session(SessionRecord(tenant_id=T, session_id=S))
            await a.begin_turn(T, S, "turn_1")
            await b.begin_turn(T, S, "turn_2")  # another node's newer turn fences turn_1 out
            with pytest.raises(StaleTurn):
                await a.commit_answer(answer("turn_1"), event("turn_1", "turn.completed", seq=5))
            assert await a.history(T, S, limit=10) == []
            kinds = [(e.turn_id, e.type) for e in await a.list_events(T, S, after=0, limit=10)]
            assert kinds == [("turn_1", "turn.cancelled")]  # written by the bump that fenced it out
        finally:
            await b.close()
            await a.close()


async def test_sqlite_writes_again_at_start_the_terminal_events_a_crash_lost(tmp_path: Path) -> None:
    """A crash image taken while events.db is locked (its writer cannot commit): the answers
    and their copies are in sessions.db, the events are not in events.db. Opened again, the
    store writes them there (`agentos.store.sqlite`)."""
    live, image = tmp_path / "live", tmp_path / "image"
    store = SQLiteStore(live, StoreConfig(busy_timeout_ms=60_000))
    await store.start()
    await store.create_session(SessionRecord(tenant_id=T, session_id=S))
    lock = sqlite3.connect(live / "events.db", isolation_level=None)
    lock.execute("BEGIN EXCLUSIVE")  # the events writer now waits for it
    try:
        for i in range(3):
            await store.commit_answer(answer(f"t{i}"), event(f"t{i}", "turn.completed", seq=4))
        image.mkdir()
        for file in live.iterdir():  # nothing writes meanwhile: a consistent image, as after kill -9
            shutil.copy(file, image / file.name)
    finally:
        lock.execute("ROLLBACK")
        lock.close()
        await store.close()
    assert sqlite3.connect(image / "events.db").execute("SELECT count(*) FROM events").fetchone()[0] == 0
    reopened = SQLiteStore(image, StoreConfig())
    await reopened.start()
    try:
        events = await reopened.list_events(T, S, after=0, limit=10)
        assert [(e.turn_id, e.type, e.seq) for e in events] == [(f"t{i}", "turn.completed", 4) for i in range(3)]
        assert [m.turn_id for m in await reopened.list_messages(T, S, after=0, limit=10)] == ["t0", "t1", "t2"]
    finally:
        await reopened.close()
    again = SQLiteStore(image, StoreConfig())  # written once: the copies were deleted
    await again.start()
    try:
        assert len(await again.list_events(T, S, after=0, limit=10)) == 3
    finally:
        await again.close()
