"""Two installations side by side in one PostgreSQL database (two `store.postgres_schema`s) never
hear each other's notifications: LISTEN/NOTIFY is database-wide, so every channel of ours is
named per schema (`pg_pool.channel`): the run requests' (`agentos.agents.leases`), the tenant
registry's (`agentos.tenancy.pg_tables`) and the agents' (`agentos.agents.changes`).

PostgreSQL delivers the notifications of different transactions in their commit order, so a
listener that hears its own schema's notification, sent after the other schema's, would have
heard the other's before it: the test waits on that event, never on time.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from agentos.agents.leases import send_request
from agentos.config import CoordinationConfig, StoreConfig
from agentos.journal.postgres import PgJournalStore
from agentos.store import pg_pool
from agentos.tenancy.records import Tenant

pytest.importorskip("asyncpg")


@pytest.fixture
async def other_pg() -> AsyncIterator[StoreConfig]:
    """A second fresh schema in the same database: the other installation."""
    from tests.postgres import fresh_schema

    async for config in fresh_schema():
        yield config


@asynccontextmanager
async def listening(config: StoreConfig, channel: str) -> AsyncIterator[asyncio.Queue[str]]:
    """The payloads heard on `channel`, on a connection of the installation in `config`."""
    heard: asyncio.Queue[str] = asyncio.Queue()
    conn = await pg_pool.connect(config)

    def on_notification(_conn: Any, _pid: int, _channel: str, payload: str) -> None:
        heard.put_nowait(payload)

    try:
        await conn.add_listener(channel, on_notification)
        yield heard
    finally:
        await conn.close()


@pytest.fixture
async def journals(pg: StoreConfig, other_pg: StoreConfig) -> AsyncIterator[tuple[PgJournalStore, PgJournalStore]]:
    """The run journals of the two installations: mine (in `pg`) and theirs."""
    stores = PgJournalStore(pg, CoordinationConfig(), node="mine"), PgJournalStore(other_pg, CoordinationConfig())
    for store in stores:
        await store.open()
    try:
        yield stores
    finally:
        for store in stores:
            await store.close()


async def test_a_run_request_wakes_only_the_nodes_of_its_own_schema(pg: StoreConfig, journals: Any) -> None:
    mine, theirs = journals
    assert mine.channel == f"agentos_run_requests_{pg.postgres_schema}"
    async with listening(pg, mine.channel) as heard:  # where mine's `LeaseKeeper` listens
        await send_request(theirs, "acme", "run_theirs", '{"kind": "cancel"}', 1)
        await send_request(mine, "acme", "run_mine", '{"kind": "cancel"}', 1)
        assert await asyncio.wait_for(heard.get(), 5.0) == "run_mine"  # the old shared channel: run_theirs first
        assert heard.empty()


async def test_a_tenant_change_reaches_only_the_registry_of_its_own_schema(
    pg: StoreConfig, other_pg: StoreConfig
) -> None:
    from agentos.tenancy.pg_tables import PgTenantTables

    mine, theirs = PgTenantTables(pg, b"p" * 32), PgTenantTables(other_pg, b"p" * 32)
    for tables in (mine, theirs):
        await tables.open()
    try:
        assert mine.channel != theirs.channel
        async with listening(pg, mine.channel) as heard:  # where mine's registry follows changes
            await theirs.put_tenant(Tenant(tenant_id="theirs"), create=True)
            await mine.put_tenant(Tenant(tenant_id="mine"), create=True)
            assert await asyncio.wait_for(heard.get(), 5.0) == "t:mine"
            assert heard.empty()
    finally:
        for tables in (mine, theirs):
            await tables.close()


async def test_an_agent_write_reaches_only_the_nodes_of_its_own_schema(pg: StoreConfig, journals: Any) -> None:
    mine, theirs = journals
    assert mine.journal.agents_channel == f"agentos_agents_{pg.postgres_schema}"
    async with listening(pg, mine.journal.agents_channel) as heard:  # where mine's `AgentChanges` listens
        await theirs.write([theirs.journal.put_agent("theirs", "helper", "{}", "api", 1)])
        await mine.write([mine.journal.put_agent("mine", "helper", "{}", "api", 1)])
        async with asyncio.timeout(5.0):
            assert await heard.get() == "mine"  # the tenant whose agents changed
        assert heard.empty()


def test_a_channel_too_long_for_postgresql_keeps_two_schemas_apart() -> None:
    """PostgreSQL caps a channel at 63 bytes; cutting the name there would merge two long
    schema names that share their first letters."""
    one, two = "s" * 60 + "_one", "s" * 60 + "_two"
    names = {pg_pool.channel("agentos_run_requests", schema) for schema in (one, two)}
    assert len(names) == 2
    assert all(len(name.encode()) <= pg_pool.CHANNEL_MAX_BYTES for name in names)
    assert pg_pool.channel("agentos_tenants", "t_1") == "agentos_tenants_t_1"  # short ones read as before
