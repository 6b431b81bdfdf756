"""Schema migrations for the PostgreSQL store: numbered SQL files, applied once, under a lock.

Theory of operation. `agentos/store/migrations/postgres/NNNN_name.sql` are the migrations, in
the order of their number. `migrate()` takes a session-level `pg_advisory_lock` (so nodes
starting at once queue up: the first applies, the others find nothing left to do), creates
`schema_migrations(version, checksum, applied_at)` if needed, checks that every applied file
is unchanged (its SHA-256 is recorded; an edited applied migration is an error, never silently
skipped), then applies each pending file in its own transaction together with its
`schema_migrations` row. A failed file rolls back alone and stops the run.

Files already applied are never edited: a change to the schema is a new file.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING

from agentos.errors import ConfigError

if TYPE_CHECKING:
    import asyncpg

LOCK_KEY = 0x6167656E746F73  # "agentos": one lock per database, whatever the schema
_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_TABLE = """CREATE TABLE IF NOT EXISTS schema_migrations (
    version INTEGER PRIMARY KEY,
    checksum TEXT NOT NULL,
    applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
)"""


class MigrationError(ConfigError):
    """The database's schema does not match the migrations this version ships."""


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class MigrationState:
    version: int
    name: str
    applied_at: str | None  # None: pending


def shipped() -> list[Migration]:
    """The migrations in this package, by version."""
    found = []
    for entry in resources.files("agentos.store.migrations.postgres").iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    return sorted(found, key=lambda m: m.version)


async def migrate(
    conn: asyncpg.Connection, migrations: Sequence[Migration] | None = None, *, schema: str = ""
) -> list[int]:
    """Apply the pending migrations; the versions applied by this call (empty: up to date).

    `schema` (the connection's search_path, `store.postgres_schema`) is created first if missing.

    Raises:
        MigrationError: an applied migration was edited, or the database is newer than this code.
    """
    migrations = shipped() if migrations is None else migrations
    await conn.execute("SELECT pg_advisory_lock($1)", LOCK_KEY)
    try:
        if schema:  # under the lock: two nodes creating it at once would collide
            await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        await conn.execute(_TABLE)
        applied = await _applied(conn)
        _verify(applied, migrations)
        done = []
        for migration in migrations:
            if migration.version in applied:
                continue
            async with conn.transaction():
                await conn.execute(migration.sql)
                await conn.execute(
                    "INSERT INTO schema_migrations (version, checksum) VALUES ($1, $2)",
                    migration.version,
                    migration.checksum,
                )
            done.append(migration.version)
        return done
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", LOCK_KEY)


async def status(conn: asyncpg.Connection, migrations: Sequence[Migration] | None = None) -> list[MigrationState]:
    """Every shipped migration with when it was applied (None: pending).

    Raises:
        MigrationError: as `migrate` would.
    """
    migrations = shipped() if migrations is None else migrations
    exists = await conn.fetchval("SELECT to_regclass('schema_migrations') IS NOT NULL")
    applied = await _applied(conn) if exists else {}
    _verify(applied, migrations)
    when = {}
    if exists:
        when = {v: str(at) for v, at in await conn.fetch("SELECT version, applied_at FROM schema_migrations")}
    return [MigrationState(m.version, m.name, when.get(m.version)) for m in migrations]


async def _applied(conn: asyncpg.Connection) -> dict[int, str]:
    return {v: c for v, c in await conn.fetch("SELECT version, checksum FROM schema_migrations")}


def _verify(applied: dict[int, str], migrations: Sequence[Migration]) -> None:
    known = {m.version: m for m in migrations}
    for version, checksum in sorted(applied.items()):
        migration = known.get(version)
        if migration is None:
            raise MigrationError(
                f"store.postgres_url: the database has migration {version:04d}, which this version of "
                "Agent OS does not know (a newer version migrated it)"
            )
        if migration.checksum != checksum:
            raise MigrationError(
                f"store.postgres_url: migration {version:04d}_{migration.name}.sql was edited after it was "
                "applied (checksum mismatch); restore the file and put the change in a new migration"
            )
