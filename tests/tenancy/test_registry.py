"""The tenant registry's contract on each storage: a real SQLite file and a fresh PostgreSQL
schema (tests/postgres.py), with a fake wall clock (expiry without sleeping).

Every test here runs on both; what only one storage does (the SQLite file's bytes, the store
turned off, PostgreSQL's nodes) has its own test, named so.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from agentos.clock import wall_ms
from agentos.config.identity import IssuerConfig
from agentos.config.tenants import TenantLimits
from agentos.errors import InvalidInput
from agentos.tenancy.keys import checksum, parse
from agentos.tenancy.principal import Principal, Scope
from agentos.tenancy.records import KeyNotFound, TenantExists, TenantNotFound
from agentos.tenancy.registry import Refused, RegistryStatistics, TenantRegistry
from agentos.tenancy.storage import RegistryStorage
from agentos.tenancy.tables import TenantTables, count_usable_keys
from agentos.testing import FakeClock
from tests.postgres import fresh_schema

Storage = Callable[[bytes], RegistryStorage]
PEPPER = b"x" * 32
START_S = 1_800_000_000.0


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START_S)


@pytest.fixture(params=["sqlite", "postgres"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Storage]:
    """Makes the storage of one registry (a node); every one made in a test shares the same rows."""
    if request.param == "sqlite":
        yield lambda pepper: TenantTables(tmp_path / "tenants.db")
        return
    from agentos.tenancy.pg_tables import PgTenantTables

    async for config in fresh_schema():
        yield lambda pepper, config=config: PgTenantTables(config, pepper)  # type: ignore[misc]  # the default binds this schema


@pytest.fixture
def make(backend: Storage, clock: FakeClock) -> Callable[..., TenantRegistry]:
    def build(pepper: bytes = PEPPER) -> TenantRegistry:
        return TenantRegistry(backend(pepper), pepper, now_ms=lambda: int(clock.now() * 1000))

    return build


@pytest.fixture
async def registry(make: Callable[..., TenantRegistry]) -> AsyncIterator[TenantRegistry]:
    r = make()
    await r.open()
    yield r
    await r.close()


async def test_tenant_default_always_exists(registry: TenantRegistry) -> None:
    assert registry.tenant("default").tenant_id == "default"
    assert [t.tenant_id for t in registry.tenants(after=None, limit=10)] == ["default"]
    assert not registry.has_usable_keys()


async def test_a_created_key_authenticates_as_its_tenant_with_its_scopes(registry: TenantRegistry) -> None:
    await registry.create_tenant("acme", name="Acme", limits={"max_sessions": 5})
    key, record = await registry.create_key("acme", name="ci", scopes=[Scope.SESSIONS_READ])
    who = registry.authenticate(key)
    assert isinstance(who, Principal)
    assert (who.tenant_id, who.key_id, who.scopes) == ("acme", record.key_id, frozenset({Scope.SESSIONS_READ}))
    assert who.limits == TenantLimits(max_sessions=5)
    assert registry.has_usable_keys()
    assert registry.key(record.key_id).hash != b"" and key not in repr(record)


async def test_a_wrong_secret_of_a_known_key_id_is_refused_with_its_key_id(registry: TenantRegistry) -> None:
    key, record = await registry.create_key("default", scopes=[Scope.ADMIN])
    other, _ = await registry.create_key("default", scopes=[Scope.ADMIN])
    forged = f"aos_{record.key_id}_{parse(other).secret}"
    assert registry.authenticate(forged + checksum(forged)) == Refused(record.key_id, "unknown key")
    assert registry.authenticate("aos_nope") == Refused("", "not an Agent OS key")


async def test_revoke_takes_effect_at_once_and_is_idempotent(registry: TenantRegistry, clock: FakeClock) -> None:
    key, record = await registry.create_key("default", scopes=[Scope.SESSIONS_READ])
    clock.advance(5)
    revoked = await registry.revoke_key(record.key_id)
    assert revoked.revoked_ms == int((START_S + 5) * 1000)
    assert registry.authenticate(key) == Refused(record.key_id, "the key was revoked")
    clock.advance(5)
    assert (await registry.revoke_key(record.key_id)).revoked_ms == revoked.revoked_ms
    assert not registry.has_usable_keys()
    with pytest.raises(KeyNotFound):
        await registry.revoke_key("nope")


async def test_a_key_expires_by_the_injected_clock(registry: TenantRegistry, clock: FakeClock) -> None:
    key, record = await registry.create_key("default", scopes=[Scope.RUNS_READ], expires_in_s=60)
    assert record.expires_ms == int(START_S * 1000) + 60_000
    clock.advance(59.999)
    assert isinstance(registry.authenticate(key), Principal)
    clock.advance(0.001)
    assert registry.authenticate(key) == Refused(record.key_id, "the key has expired")
    assert record.status(registry.now_ms()) == "expired"
    assert not registry.has_usable_keys()
    with pytest.raises(InvalidInput):
        await registry.create_key("default", expires_in_s=0)


async def test_disabling_a_tenant_refuses_its_keys_and_enabling_it_restores_them(registry: TenantRegistry) -> None:
    await registry.create_tenant("acme")
    key, _ = await registry.create_key("acme", scopes=[Scope.SESSIONS_READ])
    other, _ = await registry.create_key("default", scopes=[Scope.SESSIONS_READ])
    await registry.update_tenant("acme", disabled=True)
    assert isinstance(registry.authenticate(key), Refused)
    assert isinstance(registry.authenticate(other), Principal)
    await registry.update_tenant("acme", disabled=False, limits={"weight": 7})
    who = registry.authenticate(key)
    assert isinstance(who, Principal) and who.limits.weight == 7
    await registry.update_tenant("acme", limits={"weight": None})
    assert registry.tenant("acme").limits == {}


async def test_bad_tenants_and_limits_are_refused(registry: TenantRegistry) -> None:
    for bad in ["", "Acme", "-x", "a b", "x" * 64, "../x"]:
        with pytest.raises(InvalidInput):
            await registry.create_tenant(bad)
    with pytest.raises(InvalidInput, match="unknown limit"):
        await registry.create_tenant("acme", limits={"nope": 1})
    with pytest.raises(InvalidInput):
        await registry.create_tenant("acme", limits={"weight": 0})
    await registry.create_tenant("acme")
    with pytest.raises(TenantExists):
        await registry.create_tenant("acme")
    with pytest.raises(TenantNotFound):
        await registry.create_key("nobody")
    with pytest.raises(TenantNotFound):
        await registry.update_tenant("nobody", disabled=True)


async def test_racing_creations_of_one_tenant_make_it_once(registry: TenantRegistry) -> None:
    results = await asyncio.gather(*(registry.create_tenant("acme") for _ in range(5)), return_exceptions=True)
    assert sum(isinstance(r, TenantExists) for r in results) == 4
    assert len([t for t in registry.tenants(after=None, limit=10) if t.tenant_id == "acme"]) == 1


async def test_lists_are_paginated_by_id(registry: TenantRegistry) -> None:
    for name in ["b", "a", "c"]:
        await registry.create_tenant(name)
    assert [t.tenant_id for t in registry.tenants(after=None, limit=2)] == ["a", "b"]
    assert [t.tenant_id for t in registry.tenants(after="b", limit=2)] == ["c", "default"]
    made = sorted([(await registry.create_key(t))[1].key_id for t in ["a", "a", "b"]])
    assert [k.key_id for k in registry.keys(limit=2)] == made[:2]
    assert [k.key_id for k in registry.keys(after=made[1])] == made[2:]
    assert {k.tenant_id for k in registry.keys(tenant_id="a")} == {"a"}


async def test_a_restart_keeps_keys_working(make: Callable[..., TenantRegistry]) -> None:
    first = make()
    await first.open()
    await first.create_tenant("acme", limits={"max_sessions": 3})
    key, record = await first.create_key("acme", scopes=[Scope.SESSIONS_WRITE], expires_in_s=3600)
    revoked, revoked_record = await first.create_key("acme")
    await first.revoke_key(revoked_record.key_id)
    await first.close()

    second = make()
    await second.open()
    try:
        who = second.authenticate(key)
        assert isinstance(who, Principal) and who.limits.max_sessions == 3
        assert isinstance(second.authenticate(revoked), Refused)
        assert second.key(record.key_id) == record
        assert second.statistics() == RegistryStatistics(tenants=2, keys=2, usable_keys=1)
    finally:
        await second.close()


async def test_sqlite_only_the_hash_is_on_disk_and_a_lost_pepper_refuses_every_key(tmp_path: Path) -> None:
    first = TenantRegistry(tmp_path / "tenants.db", PEPPER)
    await first.open()
    key, record = await first.create_key("default", scopes=[Scope.SESSIONS_WRITE], expires_in_s=3600)
    revoked, revoked_record = await first.create_key("default")
    await first.revoke_key(revoked_record.key_id)
    await first.close()

    on_disk = _registry_files(tmp_path)
    for secret in (parse(key).secret, parse(revoked).secret):
        assert secret.encode() not in on_disk
    assert key.encode() not in on_disk and record.hash in on_disk and record.key_id.encode() in on_disk
    assert count_usable_keys(tmp_path / "tenants.db", wall_ms()) == 1

    third = TenantRegistry(tmp_path / "tenants.db", b"y" * 32)  # the pepper lost: no key matches its hash
    await third.open()
    try:
        assert third.authenticate(key) == Refused(record.key_id, "unknown key")
    finally:
        await third.close()


async def test_with_the_store_off_the_registry_lives_in_memory() -> None:
    registry = TenantRegistry(None, PEPPER)
    await registry.open()
    try:
        key, _ = await registry.create_key("default", scopes=[Scope.ADMIN])
        assert isinstance(registry.authenticate(key), Principal)
        assert registry.statistics().usable_keys == 1
    finally:
        await registry.close()


def _registry_files(directory: Path) -> bytes:
    """Every byte of tenants.db and its WAL (what a stolen copy of the file would hold)."""
    return b"".join(p.read_bytes() for p in directory.iterdir() if p.name.startswith("tenants.db"))


async def test_budgets_of_tenants_and_keys_are_kept_and_read_back(make: Callable[..., TenantRegistry]) -> None:
    first = make()
    await first.open()
    await first.create_tenant("acme", limits={"budget_per_day": 2.5})
    _, record = await first.create_key("acme", name="ci", budgets=(0.5, 10.0))
    other, _ = await first.create_key("acme", name="plain")
    await first.update_key(record.key_id, budget_per_month=7.25)
    with pytest.raises(InvalidInput):
        await first.update_key(record.key_id, budget_per_day=float("nan"))
    with pytest.raises(InvalidInput):
        await first.create_key("acme", budgets=(-1.0, 0.0))
    await first.close()
    second = make()  # another node, or a restart: from the rows
    await second.open()
    try:
        assert second.tenant_budgets("acme") == (2.5, 0.0)
        assert second.key_budgets(record.key_id) == (0.5, 7.25)
        assert second.key_budgets(parse(other).key_id) == (0.0, 0.0)
        assert second.key_budgets("nokey") == (0.0, 0.0) and second.tenant_budgets("nobody") == (0.0, 0.0)
    finally:
        await second.close()


async def test_a_tenants_db_from_before_key_budgets_gains_their_columns(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "tenants.db"
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE tenants (tenant_id TEXT PRIMARY KEY, name TEXT NOT NULL, limits TEXT NOT NULL,"
        " disabled INTEGER NOT NULL, created_ms INTEGER NOT NULL);"
        "CREATE TABLE api_keys (key_id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, name TEXT NOT NULL,"
        " scopes TEXT NOT NULL, created_ms INTEGER NOT NULL, expires_ms INTEGER, revoked_ms INTEGER,"
        " hash BLOB NOT NULL);"
        "INSERT INTO tenants VALUES ('default', 'default', '{}', 0, 1);"
        "INSERT INTO api_keys VALUES ('k_old', 'default', 'old', 'admin', 1, NULL, NULL, x'00');"
    )
    conn.commit()
    conn.close()
    registry = TenantRegistry(path, PEPPER)
    await registry.open()
    try:
        assert registry.key_budgets("k_old") == (0.0, 0.0)
        await registry.update_key("k_old", budget_per_day=1.0)
        assert registry.key("k_old").budget_per_day == 1.0
        assert registry.tenant("default").issuers == ()  # and tenants their issuers' (issue 30)
        await registry.set_issuers("default", (ISSUER,))
        assert registry.tenant("default").issuers == (ISSUER,)
    finally:
        await registry.close()


ISSUER = IssuerConfig(tenant="acme", issuer="https://login.example.com", audience="agentos", algorithms=["ES256"])


async def test_a_tenants_issuers_are_kept_beside_its_limits_and_read_back(make: Callable[..., TenantRegistry]) -> None:
    first = make()
    await first.open()
    await first.create_tenant("acme", limits={"max_sessions": 3})
    await first.set_issuers("acme", (ISSUER,))
    await first.update_tenant("acme", name="Acme")  # a later change of the tenant keeps them
    with pytest.raises(TenantNotFound):
        await first.set_issuers("nobody", (ISSUER,))
    await first.close()
    second = make()
    await second.open()
    try:
        acme = second.tenant("acme")
        assert acme.issuers == (ISSUER,) and acme.name == "Acme" and acme.limits == {"max_sessions": 3}
        await second.set_issuers("acme", ())
        assert second.tenant("acme").issuers == ()
    finally:
        await second.close()
