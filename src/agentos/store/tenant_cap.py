"""The cap on one tenant's rows of a table (`schedules.max_schedules`, `triggers.max_triggers`),
counted in the transaction that inserts the next row, so that two creates at once cannot both
pass it. Over the cap: 409 `too_many_<table>`.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

from agentos.errors import Conflict

if TYPE_CHECKING:
    import asyncpg


def too_many(table: str, cap: int) -> Conflict:
    return Conflict(f"a tenant has at most {cap} {table}", code=f"too_many_{table}")


def check_cap_sqlite(db: sqlite3.Connection, table: str, tenant_id: str, cap: int) -> None:
    """The file's one writer thread runs the insert after this: nothing comes between."""
    (count,) = db.execute(f"SELECT count(*) FROM {table} WHERE tenant_id = ?", (tenant_id,)).fetchone()
    if count >= cap:
        raise too_many(table, cap)


async def check_cap_pg(conn: asyncpg.Connection, table: str, tenant_id: str, cap: int) -> None:
    """Inside the insert's transaction: the tenant's advisory lock on `table`, held until it ends,
    makes nodes that create at once take turns."""
    await conn.execute(f"SELECT pg_advisory_xact_lock(hashtextextended('agentos.{table}:' || $1, 0))", tenant_id)
    count = await conn.fetchval(f"SELECT count(*) FROM {table} WHERE tenant_id = $1", tenant_id)
    if count >= cap:
        raise too_many(table, cap)
