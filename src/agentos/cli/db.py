"""`agentos db migrate` and `agentos db status`: the PostgreSQL store's schema, by hand.

The server migrates at start anyway (`agentos.store.pg_migrations`, under an advisory lock);
these commands let an operator do it before a roll-out, or see where a database stands. Both
read the same settings as `agentos serve` (file, `AGENTOS_*` env, flags).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from agentos.cli.serve import add_store_flags, settings_from_args
from agentos.config import Settings
from agentos.errors import ConfigError

if TYPE_CHECKING:  # the store's modules load only when a `db` command runs
    from agentos.store import pg_migrations


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `db migrate` and `db status` to the `agentos` parser."""
    db = commands.add_parser("db", help="the PostgreSQL store's schema")
    db_commands = db.add_subparsers(dest="db_command", required=True)
    for name, help_text in (("migrate", "apply pending migrations"), ("status", "applied and pending migrations")):
        sub = db_commands.add_parser(name, help=help_text)
        sub.add_argument("--config", type=Path, help="TOML config file")
        add_store_flags(sub)
        sub.set_defaults(handler=_db, db_command=name)


def _db(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    return migrate_command(settings) if args.db_command == "migrate" else status_command(settings)


def migrate_command(settings: Settings) -> int:
    """Apply the pending migrations and say which.

    Raises:
        ConfigError: no postgres backend configured, the database unreachable, or a schema mismatch.
    """
    from agentos.store import pg_migrations

    applied = asyncio.run(_migrate(settings))
    names = {m.version: m.name for m in pg_migrations.shipped()}
    for version in applied:
        sys.stdout.write(f"applied {version:04d}_{names[version]}\n")
    if not applied:
        sys.stdout.write("up to date\n")
    return 0


def status_command(settings: Settings) -> int:
    """Print each migration with when it was applied, or `pending`; exit 1 if any is pending.

    Raises:
        ConfigError: as `migrate_command`.
    """
    states = asyncio.run(_status(settings))
    for state in states:
        sys.stdout.write(f"{state.version:04d}_{state.name}  {state.applied_at or 'pending'}\n")
    return 1 if any(state.applied_at is None for state in states) else 0


def _require_postgres(settings: Settings) -> None:
    if settings.store.backend != "postgres":
        raise ConfigError('store.backend: agentos db needs store.backend = "postgres" (and store.postgres_url)')


async def _migrate(settings: Settings) -> list[int]:
    from agentos.store import pg_migrations, pg_pool

    _require_postgres(settings)
    conn = await pg_pool.connect(settings.store)
    try:
        return await pg_migrations.migrate(conn, schema=settings.store.postgres_schema)
    finally:
        await conn.close()


async def _status(settings: Settings) -> list[pg_migrations.MigrationState]:
    from agentos.store import pg_migrations, pg_pool

    _require_postgres(settings)
    conn = await pg_pool.connect(settings.store)
    try:
        return await pg_migrations.status(conn)
    finally:
        await conn.close()
