"""The usage ledger on every store (memory, SQLite, PostgreSQL; the `store` fixture): rows queued
by many tasks at once are all there, summed exactly, grouped right, and one tenant's query
never sees another's rows. The ledger's part of the store contract."""

from __future__ import annotations

import asyncio
import sqlite3
from collections import Counter
from pathlib import Path
from typing import TypedDict

import msgspec
import pytest

from agentos.config import StoreConfig
from agentos.store.base import Store
from agentos.store.ledger import DAY_MS, UsageQuery, UsageRow, day_of, select_totals
from agentos.store.records import MessageRecord, SessionRecord
from agentos.store.sqlite import SQLiteStore

DAY0 = 20_000 * DAY_MS  # 2024-10-04, UTC midnight


class Window(TypedDict):
    from_ms: int
    to_ms: int


ALL_TIME = Window(from_ms=0, to_ms=2**62)


def row(n: int, *, tenant: str = "acme", cost: float | None = 0.25, at_ms: int | None = None) -> UsageRow:
    """The n-th call: two models, three sessions, two days; costs in binary fractions (exact sums)."""
    return UsageRow(
        tenant_id=tenant,
        key_id=f"k{n % 2}",
        agent="helper" if n % 4 == 0 else "",
        run_id="",
        session_id=f"s{n % 3}",
        model="m" if n % 2 else "fast",
        target="mock/big" if n % 2 else "mock/small",
        prompt_tokens=10 + n,
        completion_tokens=n,
        cache_read_tokens=n % 5,
        cache_write_tokens=1,
        cost=cost,
        at_ms=DAY0 + (n % 2) * DAY_MS + n,
    )


async def record_concurrently(store: Store, rows: list[UsageRow]) -> None:
    """Each row from its own task, all released at once: the writer batches them as they come."""
    go = asyncio.Event()

    async def one(r: UsageRow) -> None:
        await go.wait()
        store.record_usage(r)

    tasks = [asyncio.create_task(one(r)) for r in rows]
    await asyncio.sleep(0)  # every task waits on `go` (a yield, not a wait for time)
    go.set()
    await asyncio.gather(*tasks)


async def test_rows_recorded_concurrently_sum_exactly(store: Store) -> None:
    rows = [row(n) for n in range(200)]
    await record_concurrently(store, rows)
    [total] = await store.usage_totals(UsageQuery(tenant_id="acme", **ALL_TIME))
    assert total.calls == 200
    assert total.prompt_tokens == sum(r.prompt_tokens for r in rows)
    assert total.completion_tokens == sum(r.completion_tokens for r in rows)
    assert total.cache_read_tokens == sum(r.cache_read_tokens for r in rows)
    assert total.cache_write_tokens == 200
    assert total.cost == 50.0 and total.unpriced_calls == 0
    assert total.model is msgspec.UNSET  # not grouped by


async def test_grouping(store: Store) -> None:
    rows = [row(n) for n in range(60)]
    for r in rows:
        store.record_usage(r)
    by = await store.usage_totals(UsageQuery(tenant_id="acme", group_by=("model", "day"), **ALL_TIME))
    assert [(t.model, t.day, t.calls) for t in by] == [("fast", day_of(DAY0), 30), ("m", day_of(DAY0 + DAY_MS), 30)]
    assert by[0].day == "2024-10-04"
    sessions = await store.usage_totals(UsageQuery(tenant_id="acme", group_by=("session",), **ALL_TIME))
    assert {t.session: t.calls for t in sessions} == Counter(f"s{n % 3}" for n in range(60))
    agents = await store.usage_totals(UsageQuery(tenant_id="acme", group_by=("agent", "key"), **ALL_TIME))
    expected = Counter(("helper" if n % 4 == 0 else "", f"k{n % 2}") for n in range(60))
    assert {(t.agent, t.key): t.calls for t in agents} == expected
    for t in agents:
        assert t.prompt_tokens == sum(r.prompt_tokens for r in rows if (r.agent, r.key_id) == (t.agent, t.key))


async def test_range_is_half_open(store: Store) -> None:
    for n in range(10):
        store.record_usage(row(n))
    first_day = await store.usage_totals(UsageQuery(tenant_id="acme", from_ms=DAY0, to_ms=DAY0 + DAY_MS))
    assert [t.calls for t in first_day] == [5]
    assert await store.usage_totals(UsageQuery(tenant_id="acme", from_ms=0, to_ms=DAY0)) == []
    at = DAY0 + 4  # row 4's millisecond: counted from it, not up to it
    assert [t.calls for t in await store.usage_totals(UsageQuery(tenant_id="acme", from_ms=at, to_ms=at + 1))] == [1]
    assert await store.usage_totals(UsageQuery(tenant_id="acme", from_ms=at, to_ms=at)) == []


async def test_one_tenant_never_sees_another(store: Store) -> None:
    for n in range(20):
        store.record_usage(row(n, tenant="acme"))
        store.record_usage(row(n, tenant="evil", cost=1.0))
    [acme] = await store.usage_totals(UsageQuery(tenant_id="acme", group_by=("tenant",), **ALL_TIME))
    assert (acme.tenant, acme.calls, acme.cost) == ("acme", 20, 5.0)
    assert await store.usage_totals(UsageQuery(tenant_id="nobody", group_by=("tenant",), **ALL_TIME)) == []
    everyone = await store.usage_totals(UsageQuery(tenant_id=None, group_by=("tenant",), **ALL_TIME))
    assert [(t.tenant, t.calls, t.cost) for t in everyone] == [("acme", 20, 5.0), ("evil", 20, 20.0)]


async def test_unpriced_calls_make_the_cost_unknown(store: Store) -> None:
    store.record_usage(row(1, cost=None))
    store.record_usage(row(3, cost=0.5))
    store.record_usage(row(2, cost=0.5))
    by_model = await store.usage_totals(UsageQuery(tenant_id="acme", group_by=("model",), **ALL_TIME))
    assert [(t.model, t.calls, t.cost, t.unpriced_calls) for t in by_model] == [("fast", 1, 0.5, 0), ("m", 2, None, 1)]
    # counted in tokens all the same
    assert by_model[1].prompt_tokens == 11 + 13


async def test_limit(store: Store) -> None:
    for n in range(9):
        store.record_usage(row(n))
    page = await store.usage_totals(UsageQuery(tenant_id="acme", group_by=("session",), limit=2, **ALL_TIME))
    assert [t.session for t in page] == ["s0", "s1"]


def test_grouped_columns_come_from_the_table_not_the_caller() -> None:
    sql, params = select_totals(
        UsageQuery(tenant_id="t'; DROP TABLE x", group_by=("day", "model"), from_ms=1, to_ms=2), lambda n: f"${n}"
    )
    assert "DROP" not in sql and params == [1, 2, "t'; DROP TABLE x"]
    assert sql.endswith("GROUP BY at_ms / 86400000, model ORDER BY at_ms / 86400000, model LIMIT 10000")


@pytest.mark.parametrize("at_ms, day", [(0, "1970-01-01"), (DAY_MS - 1, "1970-01-01"), (DAY0 + DAY_MS, "2024-10-05")])
def test_day_of(at_ms: int, day: str) -> None:
    assert day_of(at_ms) == day


async def test_a_stuck_ledger_holds_up_neither_the_loop_nor_transcripts_sqlite(tmp_path: Path) -> None:
    """Another process holds ledger.db's write lock: recording still returns at once, sessions and
    messages still commit (their own file and thread), and every row lands once the lock goes."""
    store = SQLiteStore(tmp_path, StoreConfig())
    await store.start()
    holder = sqlite3.connect(tmp_path / "ledger.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # the ledger writer's next commit waits on this (busy_timeout)
    try:
        await record_concurrently(store, [row(n) for n in range(200)])
        await store.create_session(SessionRecord(tenant_id="acme", session_id="s"))
        await store.commit_message(
            MessageRecord(tenant_id="acme", session_id="s", turn_id="t", role="user", content="hi")
        )
        assert holder.execute("SELECT COUNT(*) FROM usage_ledger").fetchone() == (0,)  # the ledger waits
        assert store.statistics().ledger_queue == 200  # counted (agentos_usage_ledger_queue), never shed
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    [total] = await store.usage_totals(UsageQuery(tenant_id="acme", **ALL_TIME))
    assert total.calls == 200 and total.cost == 50.0
    assert store.statistics().ledger_queue == 0
    await store.close()


async def test_a_locked_ledger_table_holds_up_neither_the_loop_nor_transcripts_postgres(
    pg_config: StoreConfig,
) -> None:
    """The same on PostgreSQL: another session holds usage_ledger locked; the ledger lane waits,
    the messages lane commits, and the rows land once the lock goes."""
    import asyncpg

    from agentos.store.postgres import PostgresStore

    store = PostgresStore(pg_config)
    await store.start()
    holder = await asyncpg.connect(pg_config.postgres_url, server_settings={"search_path": pg_config.postgres_schema})
    locked = holder.transaction()
    await locked.start()
    await holder.execute("LOCK TABLE usage_ledger IN EXCLUSIVE MODE")
    try:
        await record_concurrently(store, [row(n) for n in range(200)])
        await store.create_session(SessionRecord(tenant_id="acme", session_id="s"))
        await store.commit_message(
            MessageRecord(tenant_id="acme", session_id="s", turn_id="t", role="user", content="hi")
        )
        assert await holder.fetchval("SELECT count(*) FROM usage_ledger") == 0  # the ledger lane waits
    finally:
        await locked.rollback()
        await holder.close()
    [total] = await store.usage_totals(UsageQuery(tenant_id="acme", **ALL_TIME))
    assert total.calls == 200 and total.cost == 50.0
    await store.close()
