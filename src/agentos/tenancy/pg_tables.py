"""The tenant registry's rows in PostgreSQL (`store.backend = "postgres"`): one copy for every node.

Theory of operation. Each node holds every tenant and key in memory (`TenantRegistry`) and
never reads the database on a request. A write (an admin call on any node) commits its row and
a `NOTIFY` in one transaction, so the notification is sent if and only if the change is
committed. Every node, the writer included, `LISTEN`s on a dedicated connection (`agentos.store.pg_follow`)
and re-reads the rows a notification names: the change is in every node's memory within a
few milliseconds of its commit. A periodic full reload covers a notification that was missed.

The channel is per schema (`store.postgres_schema`): NOTIFY is database-wide, and two
installations sharing a database must not hear each other.

`open` also checks this node's key pepper against the check value the database keeps (the
first node to start records it): a node with another pepper refuses to start, naming
`security.key_pepper`, instead of refusing every key made on another node. A node that ran on
SQLite before brings its `tenants.db` along once (`import_sqlite`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from agentos.config.tenants import Overrides, clamp_overrides
from agentos.errors import ConfigError
from agentos.store import pg_pool
from agentos.store.pg_follow import FULL_RELOAD_INTERVAL_S, Follower
from agentos.store.pg_health import bounded_use, outage_of
from agentos.store.records import DEFAULT_TENANT
from agentos.tenancy.pepper import pepper_check, pepper_matches
from agentos.tenancy.records import ApiKey, Tenant, decode_issuers, encode_issuers
from agentos.tenancy.storage import ChangeSink, Rows
from agentos.tenancy.tables import TenantTables

if TYPE_CHECKING:
    from pathlib import Path

    import asyncpg

    from agentos.config import StoreConfig

log = logging.getLogger("agentos.tenancy")
T = TypeVar("T")
_TENANT_COLUMNS = "tenant_id, name, limits, disabled, created_ms, issuers"
_KEY_COLUMNS = (
    "key_id, tenant_id, name, scopes, created_ms, expires_ms, revoked_ms, hash, budget_per_day, budget_per_month"
)
_INSERT_TENANT = f"INSERT INTO tenants ({_TENANT_COLUMNS}) VALUES ($1, $2, $3::jsonb, $4, $5, $6::jsonb)"
_UPSERT_TENANT = (
    _INSERT_TENANT + " ON CONFLICT (tenant_id) DO UPDATE"
    " SET name = excluded.name, limits = excluded.limits, disabled = excluded.disabled, issuers = excluded.issuers"
)
_UPSERT_KEY = (
    f"INSERT INTO api_keys ({_KEY_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
    " ON CONFLICT (key_id) DO UPDATE SET name = excluded.name, scopes = excluded.scopes,"
    " expires_ms = excluded.expires_ms, revoked_ms = excluded.revoked_ms,"
    " budget_per_day = excluded.budget_per_day, budget_per_month = excluded.budget_per_month"
)
_NOTIFY = "SELECT pg_notify($1, $2)"
_ANYTHING_BUT_DEFAULT = "SELECT EXISTS (SELECT 1 FROM api_keys) OR EXISTS (SELECT 1 FROM tenants WHERE tenant_id <> $1)"
_CLOSE_TIMEOUT_S = 5.0
_PEPPER_CHECK = "pepper_check"
_PEPPER_MISMATCH = (
    "security.key_pepper: this node's key pepper is not the one the keys in {url} were hashed with;"
    " every node must have the same security.key_pepper (or the same <data_dir>/key_pepper file)"
)


@dataclass(eq=False)
class PgTenantTables:
    """A `RegistryStorage` (`agentos.tenancy.storage`) in the store's PostgreSQL database.
    `import_from`: the `tenants.db` of an embedded install, copied in once (`import_sqlite`)."""

    config: StoreConfig
    pepper: bytes
    _: KW_ONLY
    import_from: Path | None = None
    full_reload_interval_s: float = FULL_RELOAD_INTERVAL_S
    channel: str = field(init=False, default="")  # LISTEN/NOTIFY, per schema: set by `open`
    _pool: asyncpg.Pool | None = field(init=False, default=None)
    _unavailable: tuple[type[Exception], ...] = field(init=False, default=())
    _follower: Follower[Rows] | None = field(init=False, default=None)

    async def open(self) -> None:
        """Migrate, check the pepper, import `import_from` into empty tables, open a small pool
        for the (rare) writes.

        Raises:
            ConfigError: naming store.postgres_url (unreachable, a schema mismatch), store.backend
                (no asyncpg) or security.key_pepper (another pepper than the database's).
        """
        self._unavailable = pg_pool.connection_errors()
        async with pg_pool.migrated(self.config) as conn:
            schema = await conn.fetchval("SELECT current_schema()")
            self.channel = pg_pool.channel("agentos_tenants", schema)
            await self._check_pepper(conn)
            if self.import_from is not None and self.import_from.exists():
                await import_sqlite(conn, self.import_from)
        self._pool = await pg_pool.create_pool(msgspec.structs.replace(self.config, postgres_pool_max=2))

    async def _check_pepper(self, conn: asyncpg.Connection) -> None:
        stored = await conn.fetchval("SELECT value FROM tenancy_meta WHERE name = $1", _PEPPER_CHECK)
        if stored is None:  # the first node: record ours (a node racing it may win; then compare)
            check = await asyncio.to_thread(pepper_check, self.pepper)
            insert = "INSERT INTO tenancy_meta VALUES ($1, $2) ON CONFLICT (name) DO NOTHING"
            await conn.execute(insert, _PEPPER_CHECK, check)
            stored = await conn.fetchval("SELECT value FROM tenancy_meta WHERE name = $1", _PEPPER_CHECK)
        if not await asyncio.to_thread(pepper_matches, self.pepper, stored):
            raise ConfigError(_PEPPER_MISMATCH.format(url=pg_pool.shown_url(self.config.postgres_url)))

    async def load(self) -> Rows:
        """Raises: StoreError (StoreUnavailable: the database cannot be reached)."""
        return await self._bounded(lambda conn: read_rows(conn, None), "tenants load")

    async def put_tenant(self, tenant: Tenant, *, create: bool = False) -> bool:
        """Raises: StoreError (StoreUnavailable: the database cannot be reached)."""
        row, change = _tenant_row(tenant), f"t:{tenant.tenant_id}"
        sql = _INSERT_TENANT + " ON CONFLICT (tenant_id) DO NOTHING" if create else _UPSERT_TENANT
        written: bool = await self._bounded(lambda conn: self._write(conn, sql, row, change), "tenant write")
        return written

    async def put_key(self, key: ApiKey) -> None:
        """Raises: StoreError (StoreUnavailable: the database cannot be reached)."""
        k = key
        row = (k.key_id, k.tenant_id, k.name, " ".join(k.scopes), *_times(k), k.hash, *_budgets(k))
        await self._bounded(lambda conn: self._write(conn, _UPSERT_KEY, row, f"k:{k.key_id}"), "key write")

    async def _write(self, conn: asyncpg.Connection, sql: str, row: tuple[Any, ...], change: str) -> bool:
        """The row and its NOTIFY in one transaction: every node hears of exactly the committed changes."""
        async with conn.transaction():
            status = await conn.execute(sql, *row)
            if status.endswith(" 0"):  # ON CONFLICT DO NOTHING: not written, nothing to tell
                return False
            await conn.execute(_NOTIFY, self.channel, change)
        return True

    async def _bounded(self, use: Callable[[asyncpg.Connection], Awaitable[T]], what: str) -> T:
        """`use` a pooled connection, within `store.postgres_request_timeout_s` (as a request would)."""
        assert self._pool is not None, "open() first"
        return await bounded_use(self._pool, self.config, self._unavailable, use, what)

    async def follow(self, sink: ChangeSink) -> None:
        """Listen for every node's changes (this node's too: harmless, it re-reads its own row)."""
        self._follower = Follower(
            lambda: pg_pool.connect(self.config),
            self.channel,
            sink,
            read_rows,
            full_reload_interval_s=self.full_reload_interval_s,
            understood=lambda name: name[:2] in ("t:", "k:"),
            outage=outage_of(self.config.postgres_url),
        )
        self._follower.start()

    async def close(self) -> None:
        if self._follower is not None:
            await self._follower.close()
        if self._pool is not None:
            try:
                await asyncio.wait_for(self._pool.close(), _CLOSE_TIMEOUT_S)
            except TimeoutError:  # a database that stopped answering: drop the connections
                self._pool.terminate()


async def import_sqlite(conn: asyncpg.Connection, path: Path) -> None:
    """Copy the tenants and keys of `path` (a `tenants.db`) into empty tables, once: a node moved
    from SQLite to PostgreSQL keeps its keys (hashed with the same pepper, which `open` has just
    recorded or checked). Tables that hold anything beyond tenant "default" are left alone, so
    the file is never read again after the first start; nodes starting together queue on the lock."""
    if await conn.fetchval(_ANYTHING_BUT_DEFAULT, DEFAULT_TENANT):
        return  # every start but the first: the file is not even opened
    tables = TenantTables(path)
    await tables.open()
    try:
        tenants, keys = await tables.load()
    finally:
        await tables.close()
    async with conn.transaction():
        await conn.execute("LOCK TABLE tenants, api_keys IN SHARE ROW EXCLUSIVE MODE")
        if await conn.fetchval(_ANYTHING_BUT_DEFAULT, DEFAULT_TENANT):
            return  # another node imported first
        for t in tenants:
            await conn.execute(_UPSERT_TENANT, *_tenant_row(t))
        for k in keys:
            scopes = " ".join(k.scopes)
            await conn.execute(_UPSERT_KEY, k.key_id, k.tenant_id, k.name, scopes, *_times(k), k.hash, *_budgets(k))
    log.info("tenants: imported %d tenants and %d keys from %s", len(tenants), len(keys), path)


def _tenant_row(t: Tenant) -> tuple[str, str, str, bool, int, str]:
    limits = msgspec.json.encode(t.limits).decode()
    return t.tenant_id, t.name, limits, t.disabled, t.created_ms, encode_issuers(t.issuers)


def _times(k: ApiKey) -> tuple[int, int | None, int | None]:
    return k.created_ms, k.expires_ms, k.revoked_ms


def _budgets(k: ApiKey) -> tuple[float, float]:
    return k.budget_per_day, k.budget_per_month


async def read_rows(conn: asyncpg.Connection, changes: Iterable[str] | None) -> Rows:
    """Every row (`changes` None), or those that `changes` ("t:<tenant_id>", "k:<key_id>") name."""
    if changes is None:
        tenants = await conn.fetch(f"SELECT {_TENANT_COLUMNS} FROM tenants")
        keys = await conn.fetch(f"SELECT {_KEY_COLUMNS} FROM api_keys")
    else:
        named = list(changes)
        tenant_ids = [c[2:] for c in named if c.startswith("t:")]
        key_ids = [c[2:] for c in named if c.startswith("k:")]
        tenants = await conn.fetch(f"SELECT {_TENANT_COLUMNS} FROM tenants WHERE tenant_id = ANY($1)", tenant_ids)
        keys = await conn.fetch(f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE key_id = ANY($1)", key_ids)
    return [_tenant(r) for r in tenants], [_key(r) for r in keys]


def _tenant(row: asyncpg.Record) -> Tenant:
    limits = clamp_overrides(msgspec.json.decode(row["limits"], type=Overrides))
    return Tenant(
        tenant_id=row["tenant_id"],
        name=row["name"],
        limits=limits,
        disabled=row["disabled"],
        created_ms=row["created_ms"],
        issuers=decode_issuers(row["tenant_id"], row["issuers"]),
    )


def _key(row: asyncpg.Record) -> ApiKey:
    return ApiKey(
        key_id=row["key_id"],
        tenant_id=row["tenant_id"],
        name=row["name"],
        scopes=tuple(row["scopes"].split()),
        created_ms=row["created_ms"],
        expires_ms=row["expires_ms"],
        revoked_ms=row["revoked_ms"],
        hash=bytes(row["hash"]),
        budget_per_day=row["budget_per_day"],
        budget_per_month=row["budget_per_month"],
    )


def count_usable_keys(config: StoreConfig, now_ms: int) -> int:
    """Keys neither revoked nor expired, read before the server starts (the bind check, as
    `tables.count_usable_keys` for the SQLite file); 0 before the first start made the tables.

    Raises:
        ConfigError: naming store.postgres_url (unreachable) or store.backend (no asyncpg).
    """
    return asyncio.run(_count_usable_keys(config, now_ms))


async def _count_usable_keys(config: StoreConfig, now_ms: int) -> int:
    conn = await pg_pool.connect(config)
    try:
        if not await conn.fetchval("SELECT to_regclass('api_keys') IS NOT NULL"):
            return 0
        usable = "SELECT count(*) FROM api_keys WHERE revoked_ms IS NULL AND (expires_ms IS NULL OR expires_ms > $1)"
        return int(await conn.fetchval(usable, now_ms))
    finally:
        await conn.close()
