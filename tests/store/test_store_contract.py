"""One contract for every store (memory, SQLite, PostgreSQL; the `store` fixture is in conftest.py):
the memory store is a verified fake of the SQLite one, and PostgreSQL answers exactly like SQLite."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import msgspec

from agentos.config import StoreConfig
from agentos.store.base import Store
from agentos.store.records import AccessRecord, EventRecord, MessageRecord, MessageRole, MessageStatus, SessionRecord
from agentos.store.sqlite import SQLiteStore


def msg(
    session_id: str, turn_id: str, role: MessageRole, content: str, status: MessageStatus = "completed"
) -> MessageRecord:
    return MessageRecord(
        tenant_id="default", session_id=session_id, turn_id=turn_id, role=role, content=content, status=status
    )


async def test_sessions(store: Store) -> None:
    for sid in ("b", "a", "c"):
        await store.create_session(SessionRecord(tenant_id="default", session_id=sid, metadata={"k": sid}))
    assert (await store.get_session("default", "a")) == SessionRecord(
        tenant_id="default", session_id="a", metadata={"k": "a"}
    )
    assert await store.get_session("default", "zz") is None
    assert [s.session_id for s in await store.list_sessions("default", limit=2, after=None)] == ["a", "b"]
    assert [s.session_id for s in await store.list_sessions("default", limit=2, after="b")] == ["c"]
    assert await store.delete_session("default", "a") is True
    assert await store.delete_session("default", "a") is False
    assert await store.get_session("default", "a") is None


async def test_sessions_of_one_agent(store: Store) -> None:
    for sid, agent in (("a", "ops"), ("b", "default"), ("c", "ops"), ("d", "ops")):
        await store.create_session(SessionRecord(tenant_id="default", session_id=sid, agent=agent))
    await store.create_session(SessionRecord(tenant_id="other", session_id="e", agent="ops"))
    ops = await store.list_sessions("default", limit=2, after=None, agent="ops")
    assert [s.session_id for s in ops] == ["a", "c"]
    assert [s.session_id for s in await store.list_sessions("default", limit=2, after="c", agent="ops")] == ["d"]
    assert [s.session_id for s in await store.list_sessions("default", limit=9, after=None, agent="default")] == ["b"]
    assert await store.list_sessions("default", limit=9, after=None, agent="nobody") == []


async def test_messages_history_and_upsert(store: Store) -> None:
    await store.create_session(SessionRecord(tenant_id="default", session_id="s"))
    store.add_message(msg("s", "t1", "user", "hi"))
    await store.commit_message(msg("s", "t1", "assistant", "partial", "cancelled"))
    await store.commit_message(msg("s", "t1", "assistant", "whole"))  # a repeated write replaces, not duplicates
    store.add_message(msg("s", "t2", "user", "again"))
    history = await store.history("default", "s", limit=10)
    assert [(m.role, m.content, m.status) for m in history] == [
        ("user", "hi", "completed"),
        ("assistant", "whole", "completed"),
        ("user", "again", "completed"),
    ]
    assert [m.content for m in await store.history("default", "s", limit=2)] == ["whole", "again"]
    page = await store.list_messages("default", "s", after=0, limit=2)
    rest = await store.list_messages("default", "s", after=page[-1].message_id, limit=10)
    assert [m.content for m in page + rest] == ["hi", "whole", "again"]
    assert await store.delete_session("default", "s")
    assert await store.history("default", "s", limit=10) == []


async def test_a_rolled_back_turn_leaves_the_transcript(store: Store) -> None:
    """`on_busy` rollback: the deletion is ordered after the turn's writes queued before it,
    and touches only that turn of that tenant's session."""
    await store.create_session(SessionRecord(tenant_id="default", session_id="s"))
    await store.commit_message(msg("s", "t1", "user", "kept"))
    store.add_message(msg("s", "t2", "user", "rolled back"))  # queued, not awaited
    store.add_message(msg("s", "t2", "assistant", "partial", "cancelled"))
    await store.delete_turn_messages("other", "s", "t1")  # another tenant's: nothing
    await store.delete_turn_messages("default", "s", "t2")
    assert [m.content for m in await store.history("default", "s", limit=10)] == ["kept"]
    await store.commit_message(msg("s", "t1", "assistant", "answered"))
    await store.delete_turn_messages("default", "s", "t1")  # it completed after all: it stays
    assert [m.content for m in await store.history("default", "s", limit=10)] == ["kept", "answered"]


async def test_events(store: Store) -> None:
    await store.create_session(SessionRecord(tenant_id="default", session_id="s"))
    for name in ("turn.started", "turn.completed"):
        store.add_event(EventRecord(tenant_id="default", session_id="s", turn_id="t", type=name, data={"n": name}))
    events = await store.list_events("default", "s", after=0, limit=10)
    assert [(e.type, e.data) for e in events] == [
        ("turn.started", {"n": "turn.started"}),
        ("turn.completed", {"n": "turn.completed"}),
    ]
    assert await store.list_events("default", "s", after=events[0].event_id, limit=10) == events[1:]
    assert await store.delete_session("default", "s")
    assert await store.list_events("default", "s", after=0, limit=10) == []


async def test_a_turns_events_by_seq(store: Store) -> None:
    for tenant, sid in (("default", "s"), ("other", "o")):
        await store.create_session(SessionRecord(tenant_id=tenant, session_id=sid))
    # stored out of order, with another turn's events between, and one of another tenant
    for turn, seq, name in (("t", 1, "turn.started"), ("u", 1, "turn.started"), ("t", 9, "turn.completed")):
        store.add_event(EventRecord(tenant_id="default", session_id="s", turn_id=turn, type=name, data={}, seq=seq))
    store.add_event(EventRecord(tenant_id="default", session_id="s", turn_id="t", type="tool.call", data={}, seq=4))
    store.add_event(EventRecord(tenant_id="other", session_id="o", turn_id="t", type="x", data={}, seq=2))

    async def seqs(tenant: str, sid: str, after: int, limit: int = 10) -> list[tuple[int, str]]:
        events = await store.list_turn_events(tenant, sid, "t", after_seq=after, limit=limit)
        return [(e.seq, e.type) for e in events]

    assert await seqs("default", "s", 0) == [(1, "turn.started"), (4, "tool.call"), (9, "turn.completed")]
    assert await seqs("default", "s", 1, limit=1) == [(4, "tool.call")]
    assert await seqs("default", "s", 9) == []
    assert await seqs("default", "o", 0) == []  # another tenant's session, named by this tenant
    assert await seqs("other", "s", 0) == []  # this tenant's session, named by another tenant
    assert await seqs("other", "o", 0) == [(2, "x")]
    assert [e.seq for e in await store.list_events("default", "s", after=0, limit=10)] == [1, 1, 9, 4]


async def test_sqlite_sheds_events_and_access_rows_but_never_messages(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path, StoreConfig(queue_max_rows=5))
    await store.start()
    await store.create_session(SessionRecord(tenant_id="default", session_id="s"))
    for i in range(200):
        store.add_event(EventRecord(tenant_id="default", session_id="s", turn_id=f"t{i}", type="x", data={}))
        store.log_access(AccessRecord(ts_ms=i, method="GET", path="/", status=200, duration_ms=1.0, remote=""))
    for i in range(50):
        await store.wait_space()
        store.add_message(msg("s", f"t{i}", "user", str(i)))
    stats = store.statistics()
    await store.close()
    assert stats.events_dropped_total > 0 and stats.access_dropped_total > 0
    kept_events = sqlite3.connect(tmp_path / "events.db").execute("SELECT count(*) FROM events").fetchone()[0]
    assert kept_events + stats.events_dropped_total == 200
    kept = sqlite3.connect(tmp_path / "sessions.db").execute("SELECT count(*) FROM messages").fetchone()[0]
    assert kept == 50


async def test_sqlite_close_drains_every_queue(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path, StoreConfig(), jsonl_dir=str(tmp_path / "jsonl"))
    await store.start()
    await store.create_session(SessionRecord(tenant_id="default", session_id="s"))
    for i in range(1000):
        store.add_message(msg("s", f"t{i}", "user", str(i)))
        store.add_event(EventRecord(tenant_id="default", session_id="s", turn_id=f"t{i}", type="x", data={"i": i}))
    await store.close()
    db = sqlite3.connect(tmp_path / "sessions.db")
    assert db.execute("SELECT count(*) FROM messages").fetchone()[0] == 1000
    assert sqlite3.connect(tmp_path / "events.db").execute("SELECT count(*) FROM events").fetchone()[0] == 1000
    lines = b"".join(p.read_bytes() for p in (tmp_path / "jsonl").glob("*.jsonl")).splitlines()
    assert [msgspec.json.decode(line)["data"]["i"] for line in lines] == list(range(1000))


async def test_every_row_carries_a_tenant(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path, StoreConfig())
    await store.start()
    await store.create_session(SessionRecord(tenant_id="default", session_id="s"))
    await store.commit_message(msg("s", "t", "user", "x"))
    store.add_event(EventRecord(tenant_id="default", session_id="s", turn_id="t", type="x", data={}))
    store.log_access(AccessRecord(ts_ms=1, method="GET", path="/", status=200, duration_ms=1.0, remote=""))
    await store.close()
    for db, table in [
        ("sessions", "sessions"),
        ("sessions", "messages"),
        ("events", "events"),
        ("access", "access_log"),
    ]:
        tenants = sqlite3.connect(tmp_path / f"{db}.db").execute(f"SELECT DISTINCT tenant_id FROM {table}").fetchall()
        assert tenants == [("default",)], table


async def test_what_the_quotas_are_seeded_from(store: Store) -> None:
    """Sessions per tenant, and tokens (prompt + completion) of messages since a time, per tenant."""
    for sid, tenant in (("a", "t1"), ("b", "t1"), ("c", "t2")):
        await store.create_session(SessionRecord(session_id=sid, tenant_id=tenant))
    assert await store.session_counts() == {"t1": 2, "t2": 1}

    def answer(sid: str, tenant: str, turn: str, at_ms: int, usage: dict[str, int] | None) -> MessageRecord:
        return MessageRecord(
            session_id=sid,
            turn_id=turn,
            role="assistant",
            content="x",
            tenant_id=tenant,
            created_at_ms=at_ms,
            usage=usage,
        )

    await store.commit_message(answer("a", "t1", "old", 999, {"prompt_tokens": 100, "completion_tokens": 100}))
    await store.commit_message(answer("a", "t1", "t1", 1000, {"prompt_tokens": 3, "completion_tokens": 4}))
    await store.commit_message(answer("b", "t1", "t2", 2000, {"completion_tokens": 5}))
    await store.commit_message(answer("c", "t2", "t3", 3000, {"prompt_tokens": 1, "completion_tokens": 1}))
    await store.commit_message(answer("c", "t2", "t4", 3000, None))
    assert await store.token_usage_since(1000) == {"t1": 12, "t2": 2}
    assert await store.delete_session("t1", "b")
    assert await store.session_counts() == {"t1": 1, "t2": 1}
