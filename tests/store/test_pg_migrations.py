"""Migrations of the PostgreSQL store: fresh, idempotent, concurrent (two nodes), edited files.

Real PostgreSQL, a fresh schema per test (tests/postgres.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from agentos.config import StoreConfig
from agentos.store import pg_migrations, pg_pool
from agentos.store.pg_migrations import Migration, MigrationError
from tests.postgres import fresh_schema

pytest.importorskip("asyncpg")

SHIPPED = [m.version for m in pg_migrations.shipped()]
NEXT = SHIPPED[-1] + 1  # the number a test's extra migration takes, after every shipped one


@pytest.fixture
async def config() -> AsyncIterator[StoreConfig]:
    async for config in fresh_schema():
        yield config


async def run(config: StoreConfig, migrations: list[Migration] | None = None) -> list[int]:
    conn = await pg_pool.connect(config)
    try:
        return await pg_migrations.migrate(conn, migrations, schema=config.postgres_schema)
    finally:
        await conn.close()


async def states(config: StoreConfig, migrations: list[Migration] | None = None) -> list[pg_migrations.MigrationState]:
    conn = await pg_pool.connect(config)
    try:
        return await pg_migrations.status(conn, migrations)
    finally:
        await conn.close()


def test_the_shipped_migrations_are_numbered_from_one_without_gaps() -> None:
    shipped = pg_migrations.shipped()
    # Numbers are handed out to work done in parallel (0002..0005), so a branch may ship a later
    # one before an earlier one is merged: the order is strict, the first is 1, no number twice.
    assert SHIPPED[0] == 1 and sorted(set(SHIPPED)) == SHIPPED
    assert shipped[0].name == "init" and "CREATE TABLE sessions" in shipped[0].sql


async def test_a_fresh_database_is_migrated_then_up_to_date(config: StoreConfig) -> None:
    assert [s.applied_at for s in await states(config)] == [None] * len(SHIPPED)  # pending before
    assert await run(config) == SHIPPED
    assert await run(config) == []  # idempotent: nothing applied twice
    state = (await states(config))[0]
    assert (state.version, state.name) == (1, "init") and state.applied_at is not None


async def test_two_nodes_starting_at_once_migrate_once(config: StoreConfig) -> None:
    slow = Migration(NEXT, "slow", "SELECT pg_sleep(0.3); CREATE TABLE once (x int)")  # fails if applied twice
    migrations = [*pg_migrations.shipped(), slow]
    first, second = await asyncio.gather(run(config, migrations), run(config, migrations))
    assert sorted([first, second]) == [
        [],
        [*SHIPPED, NEXT],
    ]  # one node applied everything, the other waited then found none


async def test_an_edited_applied_migration_stops_start_up(config: StoreConfig) -> None:
    original = Migration(NEXT, "extra", "CREATE TABLE extra (x int)")
    await run(config, [*pg_migrations.shipped(), original])
    edited = Migration(NEXT, "extra", "CREATE TABLE extra (x bigint)")
    with pytest.raises(MigrationError, match=f"{NEXT:04d}_extra.sql was edited after it was applied"):
        await run(config, [*pg_migrations.shipped(), edited])
    with pytest.raises(MigrationError, match="checksum mismatch"):
        await states(config, [*pg_migrations.shipped(), edited])


async def test_a_database_newer_than_the_code_stops_start_up(config: StoreConfig) -> None:
    await run(config, [*pg_migrations.shipped(), Migration(NEXT, "future", "CREATE TABLE future (x int)")])
    with pytest.raises(MigrationError, match=f"migration {NEXT:04d}, which this version of Agent OS does not know"):
        await run(config)


async def test_a_failed_migration_rolls_back_alone_and_is_retried(config: StoreConfig) -> None:
    broken = Migration(NEXT, "broken", "CREATE TABLE half (x int); SELECT no_such_function()")
    with pytest.raises(Exception, match="no_such_function"):
        await run(config, [*pg_migrations.shipped(), broken])
    assert [s.applied_at is not None for s in await states(config, [*pg_migrations.shipped(), broken])] == [True] * len(
        SHIPPED
    ) + [False]
    fixed = Migration(NEXT, "broken", "CREATE TABLE half (x int)")  # never applied, so it may still change
    assert await run(config, [*pg_migrations.shipped(), fixed]) == [NEXT]


def test_agentos_db_migrate_and_status(
    config: StoreConfig, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentos.cli import main

    flags = ["--store-backend", "postgres", "--postgres-url", config.postgres_url]
    monkeypatch.setenv("AGENTOS_STORE_POSTGRES_SCHEMA", config.postgres_schema)
    assert main(["db", "status", *flags]) == 1  # pending
    names = [f"{m.version:04d}_{m.name}" for m in pg_migrations.shipped()]
    assert capsys.readouterr().out == "".join(f"{name}  pending\n" for name in names)
    assert main(["db", "migrate", *flags]) == 0
    assert capsys.readouterr().out == "".join(f"applied {name}\n" for name in names)
    assert main(["db", "migrate", *flags]) == 0
    assert capsys.readouterr().out == "up to date\n"
    assert main(["db", "status", *flags]) == 0
    assert capsys.readouterr().out.startswith("0001_init  20")
    assert main(["db", "status"]) == 2  # the sqlite backend: one line naming store.backend
    assert capsys.readouterr().err.startswith("agentos: store.backend: agentos db needs")
