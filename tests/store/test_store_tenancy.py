"""Both stores filter by tenant: tenant B cannot get, list, read or delete tenant A's session,
messages or events, and what B is told is exactly what it is told for a session that does not
exist. The SQLite store does it in SQL, on indexes led by tenant_id (migrated on open)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from agentos.config import StoreConfig
from agentos.store.base import Store
from agentos.store.records import EventRecord, MessageRecord, SessionRecord
from agentos.store.sqlite import SQLiteStore

A, B = "acme", "bravo"


async def fill(store: Store, tenant: str, sid: str) -> None:
    await store.create_session(SessionRecord(tenant_id=tenant, session_id=sid, metadata={"owner": tenant}))
    user = MessageRecord(tenant_id=tenant, session_id=sid, turn_id=f"t-{sid}", role="user", content=f"{tenant} secret")
    await store.commit_message(user)
    store.add_event(EventRecord(tenant_id=tenant, session_id=sid, turn_id=f"t-{sid}", type="turn.started", data={}))
    await store.list_events(tenant, sid, after=0, limit=1)  # the event is written (one ordered queue)


async def test_another_tenant_sees_nothing_of_a_session(store: Store) -> None:
    await fill(store, A, "ses_a")
    for sid in ("ses_a", "ses_missing"):  # another tenant's answers exactly like a missing one
        assert await store.get_session(B, sid) is None
        assert await store.history(B, sid, limit=10) == []
        assert await store.list_messages(B, sid, after=0, limit=10) == []
        assert await store.list_events(B, sid, after=0, limit=10) == []
        assert await store.delete_session(B, sid) is False
    assert await store.list_sessions(B, limit=10, after=None) == []
    # and nothing of A's was touched by B's delete
    assert (await store.get_session(A, "ses_a")) is not None
    assert [m.content for m in await store.history(A, "ses_a", limit=10)] == ["acme secret"]
    assert [e.type for e in await store.list_events(A, "ses_a", after=0, limit=10)] == ["turn.started"]


async def test_lists_show_only_the_callers_sessions(store: Store) -> None:
    for i in range(3):
        await fill(store, A, f"ses_a{i}")
        await fill(store, B, f"ses_b{i}")
    ours = await store.list_sessions(A, limit=2, after=None)
    assert [s.session_id for s in ours] == ["ses_a0", "ses_a1"]
    rest = await store.list_sessions(A, limit=10, after="ses_a1")
    assert [s.session_id for s in rest] == ["ses_a2"]  # the cursor does not lead into B's
    assert {s.tenant_id for s in ours + rest} == {A}
    assert [s.session_id for s in await store.list_sessions(B, limit=10, after=None)] == ["ses_b0", "ses_b1", "ses_b2"]


async def test_deleting_removes_only_the_owners_rows(store: Store) -> None:
    await fill(store, A, "ses_a")
    await fill(store, B, "ses_b")
    assert await store.delete_session(A, "ses_a") is True
    assert await store.get_session(A, "ses_a") is None
    assert await store.list_messages(A, "ses_a", after=0, limit=10) == []
    assert [m.content for m in await store.list_messages(B, "ses_b", after=0, limit=10)] == ["bravo secret"]
    assert len(await store.list_events(B, "ses_b", after=0, limit=10)) == 1


_OLD_SCHEMA = """
CREATE TABLE sessions (session_id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, agent TEXT NOT NULL,
    metadata TEXT NOT NULL, created_at_ms INTEGER NOT NULL);
CREATE TABLE messages (message_id INTEGER PRIMARY KEY AUTOINCREMENT, tenant_id TEXT NOT NULL,
    session_id TEXT NOT NULL, turn_id TEXT NOT NULL, role TEXT NOT NULL, content TEXT NOT NULL,
    status TEXT NOT NULL, usage TEXT, created_at_ms INTEGER NOT NULL, UNIQUE (turn_id, role));
CREATE INDEX messages_by_session ON messages (session_id, message_id);
INSERT INTO sessions VALUES ('ses_old', 'default', 'default', '{}', 1);
INSERT INTO messages (tenant_id, session_id, turn_id, role, content, status, created_at_ms)
    VALUES ('default', 'ses_old', 't1', 'user', 'kept', 'completed', 1);
"""


async def test_an_older_file_gets_the_tenant_indexes_and_its_rows_stay(tmp_path: Path) -> None:
    with sqlite3.connect(tmp_path / "sessions.db") as db:
        db.executescript(_OLD_SCHEMA)
    store = SQLiteStore(tmp_path, StoreConfig())
    await store.start()
    try:
        assert [m.content for m in await store.history("default", "ses_old", limit=10)] == ["kept"]
        assert await store.get_session(B, "ses_old") is None
    finally:
        await store.close()
    with sqlite3.connect(tmp_path / "sessions.db") as db:
        indexes = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        assert {"sessions_by_tenant", "messages_by_tenant"} <= indexes
        assert "messages_by_session" not in indexes
        plan = " ".join(
            str(r[3])
            for r in db.execute(
                "EXPLAIN QUERY PLAN SELECT * FROM sessions WHERE tenant_id = ? AND session_id > ?"
                " ORDER BY session_id LIMIT 5",
                (A, ""),
            )
        )
        assert "sessions_by_tenant" in plan
