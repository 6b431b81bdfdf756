"""The pool figures of GET /metrics (`pg_pool.FIGURES`): lent, waiting, and waits past the
acquire timeout, counted on a real PostgreSQL pool (tests/postgres.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import msgspec
import pytest

from agentos.metrics import Metrics
from agentos.store import pg_pool
from tests.postgres import fresh_schema

if TYPE_CHECKING:
    from asyncpg import Pool

asyncpg = pytest.importorskip("asyncpg")


@pytest.fixture
async def pool() -> AsyncIterator[Pool]:
    async for config in fresh_schema():
        one = await pg_pool.create_pool(msgspec.structs.replace(config, postgres_pool_max=1))
        yield one
        await one.close()


async def test_a_wait_past_the_timeout_is_counted_and_nothing_stays_lent(pool: Pool) -> None:
    figures = pg_pool.FIGURES
    timeouts, acquired = figures.acquire_timeouts_total, figures.acquired_total
    held, release = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        async with pg_pool.pooled(pool, 5.0) as conn:
            await conn.fetchval("SELECT 1")
            held.set()
            await release.wait()

    holder = asyncio.create_task(hold())
    await asyncio.wait_for(held.wait(), 10)
    assert figures.in_use >= 1
    with pytest.raises(TimeoutError):
        async with pg_pool.pooled(pool, 0.05):
            pass  # the one connection is lent: never reached
    assert figures.acquire_timeouts_total == timeouts + 1
    release.set()
    await asyncio.wait_for(holder, 10)
    assert figures.acquired_total == acquired + 1
    assert figures.waiting == 0


async def test_metrics_show_the_pools_once_one_exists(pool: Pool) -> None:
    text = Metrics().render().decode()
    for name in ("agentos_store_pool_in_use", "agentos_store_pool_waiting", "agentos_store_pool_acquire_timeouts"):
        assert name in text
    assert pg_pool.FIGURES.max_connections >= 1
    assert "process_cpu_seconds_total" in text and "process_resident_memory_bytes" in text


async def test_no_pool_line_once_the_pools_are_closed(pool: Pool) -> None:
    """The embedded default (SQLite) has no pool, and a closed pool is no pool: no line at all,
    since a zero would read as a pool that is idle."""
    await pool.close()
    assert not pg_pool.FIGURES.live()
    assert "agentos_store_pool" not in Metrics().render().decode()


async def test_a_released_connection_costs_no_reset_round_trip_and_keeps_its_schema(pool: Pool) -> None:
    """On release the pool sends nothing when the connection is clean (asyncpg's default sends
    `pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL`: a round trip per use,
    `pg_pool.keep_session`); a transaction left open is still rolled back; the schema stays."""
    sent: list[str] = []
    async with pool.acquire() as conn:
        schema = await conn.fetchval("SHOW search_path")  # the fresh schema (the migrations would make it)
        await conn.execute(f'CREATE SCHEMA "{schema}"')
        conn.add_query_logger(lambda record: sent.append(record.query))
        await conn.execute("CREATE TABLE kept (n int)")
    assert sent == ["CREATE TABLE kept (n int)"]  # nothing more after the last use
    async with pool.acquire() as conn:
        assert await conn.fetchval("SELECT current_schema()") == schema
        left_open = conn.transaction()
        await left_open.start()
        await conn.execute("INSERT INTO kept VALUES (1)")
    async with pool.acquire() as conn:
        assert not conn.is_in_transaction()
        assert await conn.fetchval("SELECT count(*) FROM kept") == 0  # the open one was rolled back
