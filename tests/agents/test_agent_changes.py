"""Agents made or replaced on another node, as the OpenAI front door looks them up: read again
only when this node heard of a change (or to be sure of a miss), never on every request.

Two registries on one PostgreSQL schema stand for two nodes. A change travels through the real
server, which offers this process no event to wait on: those waits are `eventually`, bounded by
`PROPAGATION_S`. The two nodes behind HTTP are tests/coordination/test_agents_across_nodes.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import asyncpg
import pytest

from agentos.agents.agents import AgentRegistry
from agentos.config import CoordinationConfig, StoreConfig
from agentos.journal.postgres import PgJournalStore
from agentos.store import pg_pool
from agentos.testing import eventually

pytest.importorskip("asyncpg")
PROPAGATION_S = 10.0
Node = Callable[[], Awaitable[AgentRegistry]]


@pytest.fixture
async def node(pg: StoreConfig) -> AsyncIterator[Node]:
    opened: list[tuple[AgentRegistry, PgJournalStore]] = []

    async def start() -> AgentRegistry:
        store = PgJournalStore(pg, CoordinationConfig(), node=f"node-{len(opened)}")
        await store.open()
        registry = AgentRegistry(store, store.journal, {})
        opened.append((registry, store))
        await registry.load()
        await registry.follow()
        await eventually(lambda: registry.changes.statistics().listening, PROPAGATION_S, "the follower")
        return registry

    yield start
    for registry, store in opened:
        await registry.close()
        await store.close()


async def test_an_agent_made_on_another_node_a_moment_ago_is_found(node: Node, pg: StoreConfig) -> None:
    a, b = await node(), await node()
    await a.create("acme", {"name": "helper"}, 1)
    await eventually(lambda: b.changes.statistics().notifications >= 1, PROPAGATION_S, "a's NOTIFY on b")
    await b.reload("acme")  # b is up to date (its NOTIFY heard before, not after): a request needs no read
    await _copy_silently(pg, "acme", "helper", "newer")  # made "a moment ago": its NOTIFY not heard yet
    assert b.changes.unchanged("acme")
    assert await b.sees("acme", "newer")  # a miss is read again before it is believed
    assert not await b.sees("acme", "nobody")
    assert not await b.sees("other", "helper")  # another tenant's


async def test_nothing_is_read_again_until_another_node_changes_the_agents(node: Node, pg: StoreConfig) -> None:
    a, b = await node(), await node()
    await a.create("acme", {"name": "helper", "system_prompt": "one"}, 1)
    await eventually(lambda: b.changes.statistics().notifications >= 1, PROPAGATION_S, "a's NOTIFY on b")
    await b.reload("acme")
    await _write_silently(pg, "acme", "helper", "stealth")  # no NOTIFY: no node hears of it
    await b.reload("acme", only_changed=True)
    assert b.get("acme", "helper").system_prompt == "one"  # not read: nothing was heard of
    await b.reload("acme")
    assert b.get("acme", "helper").system_prompt == "stealth"  # a full read sees the row
    await a.create("acme", {"name": "helper", "system_prompt": "two"}, 2)
    await eventually(lambda: not b.changes.unchanged("acme"), PROPAGATION_S, "the replacement heard on b")
    await b.reload("acme", only_changed=True)
    assert b.get("acme", "helper").system_prompt == "two"


async def _write_silently(pg: StoreConfig, tenant_id: str, name: str, system_prompt: str) -> None:
    conn: asyncpg.Connection = await pg_pool.connect(pg)
    try:
        spec = await conn.fetchval("SELECT spec FROM agents WHERE tenant_id = $1 AND name = $2", tenant_id, name)
        new = spec.replace('"system_prompt":"one"', f'"system_prompt":"{system_prompt}"')
        assert new != spec
        await conn.execute("UPDATE agents SET spec = $1 WHERE tenant_id = $2 AND name = $3", new, tenant_id, name)
    finally:
        await conn.close()


async def _copy_silently(pg: StoreConfig, tenant_id: str, name: str, new_name: str) -> None:
    conn: asyncpg.Connection = await pg_pool.connect(pg)
    try:
        copy = "INSERT INTO agents SELECT tenant_id, $3, replace(spec, $2, $3), source, created_ms, updated_ms"
        await conn.execute(f"{copy} FROM agents WHERE tenant_id = $1 AND name = $2", tenant_id, name, new_name)
    finally:
        await conn.close()
