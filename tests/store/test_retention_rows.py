"""The store's side of retention, on every store (memory, SQLite, PostgreSQL): which sessions are
idle, page by page; the oldest ledger rows deleted a bounded batch at a time; and a long
session deleted whole although its rows go in batches (SQLite)."""

from __future__ import annotations

from agentos.store.base import Store
from agentos.store.ledger import UsageQuery, UsageRow
from agentos.store.records import EventRecord, MessageRecord, SessionRecord
from agentos.store.sqlite_rows import DELETE_BATCH_ROWS

CUTOFF = 1_000_000


async def session(store: Store, session_id: str, created_ms: int, *messages_ms: int, tenant: str = "default") -> None:
    await store.create_session(SessionRecord(session_id=session_id, tenant_id=tenant, created_at_ms=created_ms))
    for n, at_ms in enumerate(messages_ms):
        await store.commit_message(
            MessageRecord(
                tenant_id=tenant,
                session_id=session_id,
                turn_id=f"{session_id}-{n}",
                role="user",
                content="x",
                created_at_ms=at_ms,
            )
        )


async def test_idle_sessions_are_those_without_activity_since_the_cutoff_page_by_page(store: Store) -> None:
    await session(store, "ses_a", 10, 20)  # idle
    await session(store, "ses_b", 10, 20, CUTOFF)  # a message at the cut-off: active
    await session(store, "ses_c", CUTOFF)  # created at the cut-off: active
    await session(store, "ses_d", 10)  # idle, no message
    await session(store, "ses_e", 10, tenant="other")  # another tenant's: never seen

    idle, after = await store.idle_sessions("default", CUTOFF, after="", limit=3)
    assert (idle, after) == (["ses_a"], "ses_c")
    idle, after = await store.idle_sessions("default", CUTOFF, after="ses_c", limit=3)
    assert (idle, after) == (["ses_d"], None)
    assert await store.idle_sessions("other", CUTOFF, after="", limit=3) == (["ses_e"], None)


async def test_the_oldest_usage_rows_go_a_bounded_batch_at_a_time(store: Store) -> None:
    for at_ms in range(25):
        store.record_usage(UsageRow(tenant_id="default", model="m", target="t", prompt_tokens=1, at_ms=at_ms))
    store.record_usage(UsageRow(tenant_id="other", model="m", target="t", prompt_tokens=1, at_ms=0))

    assert await store.expire_usage("default", 20, limit=8) == 8
    assert await store.expire_usage("default", 20, limit=8) == 8
    assert await store.expire_usage("default", 20, limit=8) == 4
    assert await store.expire_usage("default", 20, limit=8) == 0

    totals = await store.usage_totals(UsageQuery(tenant_id="default", from_ms=0, to_ms=100))
    assert sum(t.prompt_tokens for t in totals) == 5  # at 20..24
    every = await store.usage_totals(UsageQuery(tenant_id="other", from_ms=0, to_ms=100))
    assert sum(t.prompt_tokens for t in every) == 1


async def test_a_session_longer_than_a_batch_is_deleted_whole(store: Store) -> None:
    rows = DELETE_BATCH_ROWS * 2 + 7
    await session(store, "ses_long", 10)
    for n in range(rows):
        store.add_message(
            MessageRecord(tenant_id="default", session_id="ses_long", turn_id=f"t{n}", role="user", content="x")
        )
        store.add_event(EventRecord(tenant_id="default", session_id="ses_long", turn_id=f"t{n}", type="x", data={}))
    assert len(await store.list_messages("default", "ses_long", after=0, limit=rows + 1)) == rows
    assert await store.delete_session("default", "ses_long") is True
    assert await store.list_messages("default", "ses_long", after=0, limit=rows + 1) == []
    assert await store.list_events("default", "ses_long", after=0, limit=rows + 1) == []
