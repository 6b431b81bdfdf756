"""Several registries on one PostgreSQL schema, as several nodes have them: what one node changes
the others take (LISTEN/NOTIFY, and the full reload behind it), the pepper they must share, and
what a node does while the database is away.

In one process for speed and control (two registries, a TcpProxy in front of one), but every
change travels through the real PostgreSQL server, which offers this process no event to wait
on: the waits are `eventually`, bounded by `PROPAGATION_S`. tests/e2e/test_pg_tenants.py does
the same with two real `agentos serve` processes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from urllib.parse import urlsplit

import msgspec
import pytest

from agentos.config import StoreConfig, load_settings
from agentos.config.tenants import TenantLimits
from agentos.errors import ConfigError, StoreUnavailable
from agentos.server import check_bind
from agentos.services import open_tenants
from agentos.tenancy.principal import Principal, Scope
from agentos.tenancy.records import TenantExists
from agentos.tenancy.registry import Refused, TenantRegistry
from agentos.testing import eventually
from agentos.testing.tcp_proxy import TcpProxy

asyncpg = pytest.importorskip("asyncpg")

PEPPER = b"p" * 32
PROPAGATION_S = 1.0  # the documented bound (docs/deployment.md) while the LISTEN connection is up
Node = Callable[..., Awaitable[TenantRegistry]]


@pytest.fixture
async def node(pg: StoreConfig) -> AsyncIterator[Node]:
    """Starts a registry ("a node") on the test's schema; closed at the end."""
    from agentos.tenancy.pg_tables import PgTenantTables

    opened: list[TenantRegistry] = []

    async def start(
        config: StoreConfig = pg, pepper: bytes = PEPPER, full_reload_interval_s: float = 30.0
    ) -> TenantRegistry:
        storage = PgTenantTables(config, pepper, full_reload_interval_s=full_reload_interval_s)
        registry = TenantRegistry(storage, pepper)
        await registry.open()
        opened.append(registry)
        return registry

    yield start
    for registry in reversed(opened):
        await registry.close()


def usable(registry: TenantRegistry, key: str) -> Callable[[], bool]:
    return lambda: isinstance(registry.authenticate(key), Principal)


def refused(registry: TenantRegistry, key: str) -> Callable[[], bool]:
    return lambda: isinstance(registry.authenticate(key), Refused)


async def test_a_key_made_on_one_node_works_on_the_other_until_revoked_there(node: Node) -> None:
    a, b = await node(), await node()
    key, record = await a.create_key("default", scopes=[Scope.SESSIONS_READ])
    await eventually(usable(b, key), PROPAGATION_S, "the new key on b")
    assert b.key(record.key_id) == record
    await b.revoke_key(record.key_id)
    await eventually(refused(a, key), PROPAGATION_S, "the revocation on a")
    assert a.authenticate(key) == Refused(record.key_id, "the key was revoked")


async def test_a_tenant_disabled_or_limited_on_one_node_is_so_on_the_other(node: Node) -> None:
    a, b = await node(), await node()
    seen: list[tuple[str, TenantLimits]] = []
    b.watch_limits(lambda tenant_id, limits: seen.append((tenant_id, limits)))
    await a.create_tenant("acme")
    key, _ = await a.create_key("acme", scopes=[Scope.SESSIONS_READ])
    await eventually(usable(b, key), PROPAGATION_S, "acme's key on b")
    await a.update_tenant("acme", limits={"weight": 7})
    await eventually(lambda: ("acme", TenantLimits(weight=7)) in seen, PROPAGATION_S, "the new weight on b")
    await a.update_tenant("acme", disabled=True)
    await eventually(refused(b, key), PROPAGATION_S, "the disabled tenant on b")
    assert b.authenticate(key) == Refused(_key_id(key), "the key's tenant is disabled")


async def test_two_nodes_creating_one_tenant_at_once_make_it_once(node: Node) -> None:
    a, b = await node(), await node()
    results = await asyncio.gather(a.create_tenant("acme"), b.create_tenant("acme"), return_exceptions=True)
    assert sorted(type(r).__name__ for r in results) == ["Tenant", "TenantExists"]
    with pytest.raises(TenantExists):
        await a.create_tenant("acme")


async def test_a_node_with_another_pepper_refuses_to_start(node: Node) -> None:
    await node()
    with pytest.raises(ConfigError, match=r"^security\.key_pepper: this node's key pepper is not the one"):
        await node(pepper=b"q" * 32)
    await node(pepper=PEPPER)  # the same pepper again: fine


async def test_the_full_reload_catches_a_change_nobody_was_told_of(node: Node, pg: StoreConfig) -> None:
    """A row changed without NOTIFY (as if the notification were lost) is read by the periodic reload."""
    a = await node()
    b = await node(full_reload_interval_s=0.2)
    key, record = await a.create_key("default", scopes=[Scope.SESSIONS_READ])
    await eventually(usable(b, key), PROPAGATION_S, "the key on b")
    # a follows b's changes, so its first full read (when it began to listen) is behind it: on a
    # busy machine it may come later than a's start, and would read the silent change below.
    other, _ = await b.create_key("default", scopes=[Scope.SESSIONS_READ])
    await eventually(usable(a, other), PROPAGATION_S, "b's key on a")
    conn = await asyncpg.connect(pg.postgres_url, server_settings={"search_path": pg.postgres_schema})
    try:
        await conn.execute("UPDATE api_keys SET revoked_ms = 1 WHERE key_id = $1", record.key_id)
    finally:
        await conn.close()
    await eventually(refused(b, key), 5.0, "the silent revocation on b")
    assert isinstance(a.authenticate(key), Principal)  # a's reload is 30 s away: it did not hear


@pytest.mark.slow
async def test_a_node_cut_from_the_database_serves_what_it_knew_then_catches_up(node: Node, pg: StoreConfig) -> None:
    a = await node()
    key, record = await a.create_key("default", scopes=[Scope.SESSIONS_READ])
    target = urlsplit(pg.postgres_url)
    async with TcpProxy(target.hostname or "127.0.0.1", target.port or 5432) as proxy:
        proxied = target._replace(netloc=f"{target.username}@127.0.0.1:{proxy.port}").geturl()
        short = {"postgres_url": proxied, "postgres_acquire_timeout_s": 0.5, "postgres_request_timeout_s": 1.0}
        b = await node(msgspec.structs.replace(pg, **short))
        assert isinstance(b.authenticate(key), Principal)
        await proxy.cut()
        await a.revoke_key(record.key_id)  # b cannot hear of it now
        assert isinstance(b.authenticate(key), Principal)  # the last state it knew, from memory
        with pytest.raises(StoreUnavailable):
            await b.create_key("default")  # a write needs the database: 503, bounded
        await proxy.restore()
        await eventually(refused(b, key), 15.0, "b reconnected and reloaded")
        assert b.authenticate(key) == Refused(record.key_id, "the key was revoked")


def _key_id(key: str) -> str:
    from agentos.tenancy.keys import parse

    return parse(key).key_id


async def test_on_the_postgres_backend_the_registry_and_the_bind_check_use_postgresql(
    pg: StoreConfig, tmp_path: Path
) -> None:
    """`open_tenants` (the server's wiring) puts keys in PostgreSQL, and a public bind is guarded
    by a usable key there (`check_bind` runs its own event loop: in a thread here)."""
    on_pg = {"store.backend": "postgres", "store.postgres_url": pg.postgres_url}
    on_pg |= {"store.postgres_schema": pg.postgres_schema, "data_dir": str(tmp_path), "server.host": "0.0.0.0"}
    settings = load_settings(None, environ={}, overrides=on_pg)
    with pytest.raises(ConfigError, match="refusing to listen on '0.0.0.0' without API keys"):
        await asyncio.to_thread(check_bind, settings)  # before the first start: no tables yet
    registry = await open_tenants(settings)
    try:
        _, record = await registry.create_key("default", scopes=[Scope.ADMIN])
    finally:
        await registry.close()
    assert not (tmp_path / "tenants.db").exists()
    await asyncio.to_thread(check_bind, settings)  # a usable key in PostgreSQL: the bind is guarded
    registry = await open_tenants(settings)
    try:
        await registry.revoke_key(record.key_id)
    finally:
        await registry.close()
    with pytest.raises(ConfigError):
        await asyncio.to_thread(check_bind, settings)


async def test_a_node_moved_from_sqlite_keeps_its_keys_imported_once(pg: StoreConfig, tmp_path: Path) -> None:
    from agentos.tenancy.pg_tables import PgTenantTables

    embedded = TenantRegistry(tmp_path / "tenants.db", PEPPER)
    await embedded.open()
    await embedded.create_tenant("acme", limits={"max_sessions": 3})
    key, record = await embedded.create_key("acme", scopes=[Scope.SESSIONS_READ])
    await embedded.close()

    async def on_postgres() -> TenantRegistry:
        registry = TenantRegistry(PgTenantTables(pg, PEPPER, import_from=tmp_path / "tenants.db"), PEPPER)
        await registry.open()
        return registry

    first = await on_postgres()
    try:
        who = first.authenticate(key)
        assert isinstance(who, Principal) and who.limits.max_sessions == 3
        await first.revoke_key(record.key_id)
    finally:
        await first.close()
    second = await on_postgres()  # the file again: the tables are not empty, so it is not read
    try:
        assert second.authenticate(key) == Refused(record.key_id, "the key was revoked")
    finally:
        await second.close()
