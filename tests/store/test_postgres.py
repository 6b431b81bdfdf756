"""The PostgreSQL store beyond the shared contract: shedding, draining, batching, bad rows, tenants.

Real PostgreSQL (tests/postgres.py: a fresh schema per test); the rows are counted with a
connection of our own, not through the store.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import msgspec
import pytest

from agentos.config import StoreConfig
from agentos.errors import StoreError, StoreUnavailable
from agentos.store.postgres import PostgresStore
from agentos.store.records import AccessRecord, EventRecord, MessageRecord, SessionRecord
from agentos.testing.tcp_proxy import TcpProxy
from tests.postgres import fresh_schema

asyncpg = pytest.importorskip("asyncpg")


@pytest.fixture
async def config() -> AsyncIterator[StoreConfig]:
    async for config in fresh_schema():
        yield config


async def count(config: StoreConfig, sql: str) -> int:
    conn = await asyncpg.connect(config.postgres_url, server_settings={"search_path": config.postgres_schema})
    try:
        n: int = await conn.fetchval(sql)
        return n
    finally:
        await conn.close()


def msg(turn: str, content: str = "x", session: str = "s") -> MessageRecord:
    return MessageRecord(tenant_id="default", session_id=session, turn_id=turn, role="user", content=content)


async def test_sheds_events_and_access_rows_but_never_messages(config: StoreConfig) -> None:
    pg = PostgresStore(msgspec.structs.replace(config, queue_max_rows=5))
    await pg.start()
    await pg.create_session(SessionRecord(tenant_id="default", session_id="s"))
    for i in range(200):
        pg.add_event(EventRecord(tenant_id="default", session_id="s", turn_id=f"t{i}", type="x", data={}))
        pg.log_access(AccessRecord(ts_ms=i, method="GET", path="/", status=200, duration_ms=1.0, remote=""))
    for i in range(50):
        await pg.wait_space()
        pg.add_message(msg(f"t{i}"))
    stats = pg.statistics()
    await pg.close()
    assert stats.events_dropped_total > 0 and stats.access_dropped_total > 0
    assert await count(config, "SELECT count(*) FROM events") + stats.events_dropped_total == 200
    assert await count(config, "SELECT count(*) FROM access_log") + stats.access_dropped_total == 200
    assert await count(config, "SELECT count(*) FROM messages") == 50


async def test_close_drains_every_queue_in_few_transactions(config: StoreConfig, tmp_path: Path) -> None:
    batches: list[int] = []
    pg = PostgresStore(config, jsonl_dir=str(tmp_path / "jsonl"), on_batch=lambda n, _wait_ms: batches.append(n))
    await pg.start()
    await pg.create_session(SessionRecord(tenant_id="default", session_id="s"))
    for i in range(1000):
        pg.add_message(msg(f"t{i}", str(i)))
        pg.add_event(EventRecord(tenant_id="default", session_id="s", turn_id=f"t{i}", type="x", data={"i": i}))
    await pg.close()
    assert await count(config, "SELECT count(*) FROM messages") == 1000
    assert await count(config, "SELECT count(*) FROM events") == 1000
    assert sum(batches) == 1000 and len(batches) <= 2  # batch_max_rows = 1000: not a commit per row
    conn = await asyncpg.connect(config.postgres_url, server_settings={"search_path": config.postgres_schema})
    rows = await conn.fetch("SELECT data FROM events ORDER BY event_id")
    await conn.close()
    assert [msgspec.json.decode(r["data"])["i"] for r in rows] == list(range(1000))  # in order
    lines = b"".join(p.read_bytes() for p in (tmp_path / "jsonl").glob("*.jsonl")).splitlines()
    assert [msgspec.json.decode(line)["data"]["i"] for line in lines] == list(range(1000))  # jsonl_dir too


async def test_a_bad_row_fails_alone(config: StoreConfig) -> None:
    pg = PostgresStore(config)
    await pg.start()
    await pg.create_session(SessionRecord(tenant_id="default", session_id="s"))
    for i in range(3):  # queued before the bad row: the same batch, the same transaction at first
        pg.add_message(msg(f"t{i}"))
    bad = msg("t-bad", "nul \x00 byte")  # PostgreSQL text cannot hold NUL: this row fails
    with pytest.raises(StoreError, match="messages: write failed"):
        await pg.commit_message(bad)
    assert [m.turn_id for m in await pg.history("default", "s", limit=10)] == ["t0", "t1", "t2"]
    await pg.close()


async def test_every_row_carries_a_tenant(config: StoreConfig) -> None:
    pg = PostgresStore(config)
    await pg.start()
    await pg.create_session(SessionRecord(tenant_id="default", session_id="s"))
    await pg.commit_message(msg("t"))
    pg.add_event(EventRecord(tenant_id="default", session_id="s", turn_id="t", type="x", data={}))
    pg.log_access(AccessRecord(ts_ms=1, method="GET", path="/", status=200, duration_ms=1.0, remote=""))
    await pg.close()
    for table in ("sessions", "messages", "events", "access_log"):
        assert await count(config, f"SELECT count(DISTINCT tenant_id) FROM {table} WHERE tenant_id = 'default'") == 1
        assert await count(config, f"SELECT count(*) FROM {table} WHERE tenant_id <> 'default'") == 0


async def test_after_the_server_ends_the_stores_connections_writes_go_on(config: StoreConfig) -> None:
    name = f"agentos_{config.postgres_schema}"  # this store's connections, and no one else's
    pg = PostgresStore(msgspec.structs.replace(config, postgres_url=f"{config.postgres_url}?application_name={name}"))
    await pg.start()
    await pg.create_session(SessionRecord(tenant_id="default", session_id="s"))
    admin = await asyncpg.connect(config.postgres_url)
    try:  # the server ends every connection of the store (a failover, an administrator)
        ended = await admin.fetch(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", name
        )
    finally:
        await admin.close()
    assert ended  # the URL's application_name reached the server with the schema's search_path
    outcomes = []
    for i in range(3):  # the first write may fail (StoreError, never a hang); the pool then reconnects
        try:
            await pg.commit_message(msg(f"t{i}"))
            outcomes.append("ok")
        except StoreError:
            outcomes.append("failed")
    assert outcomes[-1] == "ok"
    assert [m.turn_id for m in await pg.history("default", "s", limit=10)][-1] == "t2"
    await pg.close()


async def test_a_put_that_met_an_unreachable_database_is_committed_before_later_writes(config: StoreConfig) -> None:
    """A durable put (a turn's question) whose batch found no database is kept and tried again,
    ahead of the writes after it: an answer committed later never lacks its question (a
    batch that met "too many clients" used to drop it while the next one committed)."""
    target = urlsplit(config.postgres_url)
    async with TcpProxy(target.hostname or "127.0.0.1", target.port or 5432) as proxy:
        proxied = target._replace(netloc=f"{target.username}@127.0.0.1:{proxy.port}").geturl()
        pg = PostgresStore(msgspec.structs.replace(config, postgres_url=proxied, postgres_acquire_timeout_s=0.5))
        await pg.start()
        try:
            await pg.create_session(SessionRecord(tenant_id="default", session_id="s"))
            await proxy.cut()  # the database is gone for new and pooled connections alike
            pg.add_message(msg("question"))  # fire and forget, as a turn's question
            with pytest.raises(StoreUnavailable):  # its batch failed: this one was not acknowledged
                await pg.commit_message(msg("refused"))
            await proxy.start()
            await pg.commit_message(msg("answer"))  # acknowledged: what was put before it is stored
            assert [m.turn_id for m in await pg.history("default", "s", limit=10)] == ["question", "answer"]
        finally:
            await pg.close()


async def test_an_awaited_write_behind_more_kept_puts_than_a_batch_holds_fails_at_once(config: StoreConfig) -> None:
    """The writer retries the first batch of kept puts; an answer queued behind more of them
    than a batch holds fails with them at once, instead of when its own bound runs out."""
    target = urlsplit(config.postgres_url)
    async with TcpProxy(target.hostname or "127.0.0.1", target.port or 5432) as proxy:
        proxied = target._replace(netloc=f"{target.username}@127.0.0.1:{proxy.port}").geturl()
        slow = {"postgres_acquire_timeout_s": 0.5, "postgres_request_timeout_s": 60.0, "batch_max_rows": 2}
        pg = PostgresStore(msgspec.structs.replace(config, postgres_url=proxied, **slow))
        await pg.start()
        try:
            await pg.create_session(SessionRecord(tenant_id="default", session_id="s"))
            await proxy.cut()
            for i in range(5):
                pg.add_message(msg(f"question-{i}"))
            with pytest.raises(StoreUnavailable):  # well before the 60 s bound
                await asyncio.wait_for(pg.commit_message(msg("refused")), 10.0)
            await proxy.start()
            await pg.commit_message(msg("answer"))
            turns = [m.turn_id for m in await pg.history("default", "s", limit=10)]
            assert turns == [*(f"question-{i}" for i in range(5)), "answer"]
        finally:
            await pg.close()
