"""`tenants.db`: the registry's SQLite file, written through the project's one writer.

A file of its own rather than tables in `sessions.db`: tenants and keys are few and written
rarely, but must never wait behind a burst of transcript writes (nor be shed with the events);
their schema evolves with the tenancy package alone; and an operator can back up, inspect or
move the trust data (with `key_pepper` beside it) apart from the conversations.

Every write is an upsert of the whole row, so a writer retry of a batch is harmless.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import msgspec

from agentos.config.tenants import Overrides, clamp_overrides
from agentos.store.writer import Writer
from agentos.tenancy.records import ApiKey, Tenant, decode_issuers, encode_issuers
from agentos.tenancy.storage import ChangeSink

SCHEMA = """
CREATE TABLE IF NOT EXISTS tenants (
    tenant_id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    limits TEXT NOT NULL,
    disabled INTEGER NOT NULL,
    created_ms INTEGER NOT NULL,
    issuers TEXT NOT NULL DEFAULT '[]'
);
CREATE TABLE IF NOT EXISTS api_keys (
    key_id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    name TEXT NOT NULL,
    scopes TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    expires_ms INTEGER,
    revoked_ms INTEGER,
    hash BLOB NOT NULL,
    budget_per_day REAL NOT NULL DEFAULT 0,
    budget_per_month REAL NOT NULL DEFAULT 0
);
"""
# A file written before keys had budgets (tenants had issuers) gains the columns at open (`_add_columns`).
_BUDGET_COLUMNS = ("budget_per_day", "budget_per_month")

_TENANT_COLUMNS = "tenant_id, name, limits, disabled, created_ms, issuers"
_UPSERT_TENANT = f"INSERT OR REPLACE INTO tenants ({_TENANT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)"
_CREATE_TENANT = f"INSERT OR IGNORE INTO tenants ({_TENANT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)"
_KEY_COLUMNS = (
    "key_id, tenant_id, name, scopes, created_ms, expires_ms, revoked_ms, hash, budget_per_day, budget_per_month"
)
_UPSERT_KEY = f"INSERT OR REPLACE INTO api_keys ({_KEY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"


class TenantTables:
    """The registry's file (None: an in-memory database, for `store.enabled = false`); a
    `RegistryStorage` (`agentos.tenancy.storage`)."""

    def __init__(self, path: Path | None) -> None:
        self._writer = Writer("tenants", path, SCHEMA, queue_max_rows=1000, linger_ms=0.0)

    async def open(self) -> None:
        """Raises: StoreError: the file cannot be opened."""
        await self._writer.open()
        await self._writer.submit(apply=_add_columns)

    async def load(self) -> tuple[list[Tenant], list[ApiKey]]:
        """Every row (the registry serves from memory after this). Raises: StoreError."""
        loaded: tuple[list[Tenant], list[ApiKey]] = await self._writer.submit(apply=_load)
        return loaded

    async def follow(self, sink: ChangeSink) -> None:
        """Nothing to follow: this node is the file's only writer."""

    async def close(self) -> None:
        await self._writer.close()

    async def put_tenant(self, t: Tenant, *, create: bool = False) -> bool:
        limits = msgspec.json.encode(t.limits).decode()
        row = (t.tenant_id, t.name, limits, int(t.disabled), t.created_ms, encode_issuers(t.issuers))
        if not create:
            await self._writer.submit(_UPSERT_TENANT, row)
            return True
        inserted: bool = await self._writer.submit(apply=lambda conn: conn.execute(_CREATE_TENANT, row).rowcount == 1)
        return inserted

    async def put_key(self, k: ApiKey) -> None:
        scopes = " ".join(k.scopes)
        row = (k.key_id, k.tenant_id, k.name, scopes, k.created_ms, k.expires_ms, k.revoked_ms, k.hash)
        await self._writer.submit(_UPSERT_KEY, (*row, k.budget_per_day, k.budget_per_month))


def _load(conn: sqlite3.Connection) -> tuple[list[Tenant], list[ApiKey]]:
    tenants = [
        Tenant(
            tenant_id=t,
            name=n,
            limits=_decode_limits(lim),
            disabled=bool(d),
            created_ms=c,
            issuers=decode_issuers(t, issuers),
        )
        for t, n, lim, d, c, issuers in conn.execute(f"SELECT {_TENANT_COLUMNS} FROM tenants ORDER BY tenant_id")
    ]
    keys = [
        ApiKey(
            key_id=k,
            tenant_id=t,
            name=n,
            scopes=tuple(s.split()),
            created_ms=c,
            expires_ms=e,
            revoked_ms=r,
            hash=h,
            budget_per_day=day,
            budget_per_month=month,
        )
        for k, t, n, s, c, e, r, h, day, month in conn.execute(f"SELECT {_KEY_COLUMNS} FROM api_keys ORDER BY key_id")
    ]
    return tenants, keys


def _add_columns(conn: sqlite3.Connection) -> None:
    have = {row[1] for row in conn.execute("PRAGMA table_info(api_keys)")}
    for column in _BUDGET_COLUMNS:
        if column not in have:
            conn.execute(f"ALTER TABLE api_keys ADD COLUMN {column} REAL NOT NULL DEFAULT 0")
    if "issuers" not in {row[1] for row in conn.execute("PRAGMA table_info(tenants)")}:
        conn.execute("ALTER TABLE tenants ADD COLUMN issuers TEXT NOT NULL DEFAULT '[]'")


def _decode_limits(raw: str) -> Overrides:
    return clamp_overrides(msgspec.json.decode(raw, type=Overrides))


def registry_path(data_dir: Path | None) -> Path | None:
    """Where the registry lives: `<data_dir>/tenants.db`, or None (in memory) with the store off."""
    return None if data_dir is None else data_dir / "tenants.db"


def count_usable_keys(path: Path, now_ms: int) -> int:
    """Keys in `path` neither revoked nor expired, read before the server starts (the bind check);
    0 when the file does not exist yet.

    Raises:
        sqlite3.Error: the file exists but cannot be read.
    """
    if not path.exists():
        return 0
    conn = sqlite3.connect(path)  # read-write: it may recover a WAL left by a killed server
    try:
        row = conn.execute(
            "SELECT count(*) FROM api_keys WHERE revoked_ms IS NULL AND (expires_ms IS NULL OR expires_ms > ?)",
            (now_ms,),
        ).fetchone()
    except sqlite3.OperationalError:  # a file without the table yet
        return 0
    finally:
        conn.close()
    return int(row[0])
