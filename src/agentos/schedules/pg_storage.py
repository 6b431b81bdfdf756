"""Schedules and their fires in the store's PostgreSQL database (migration 0014): every node
shares them, and every node's scheduler decides due slots.

Two nodes deciding the same schedule at once: `advance` is one transaction whose UPDATE of the
cursor names the cursor it read (row-locked: the second waits, then finds it moved and changes
nothing), and the fires go in under their unique key with `ON CONFLICT DO NOTHING`. Each fire
is committed with `synchronous_commit = on` before its run is started. `claim` takes pending
fires with `FOR UPDATE SKIP LOCKED`, so two nodes never lease the same fire at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from agentos.schedules import storage
from agentos.schedules.records import FireRow, FireStatus, NextWork, ScheduleRow
from agentos.store.pg_side_pool import SidePool
from agentos.store.tenant_cap import check_cap_pg

if TYPE_CHECKING:
    import asyncpg

    from agentos.config import StoreConfig

T = TypeVar("T")

_INSERT, _INSERT_FIRE = storage.inserts(lambda n: f"${n}")
_CLAIM = f"""
WITH due AS MATERIALIZED (
    SELECT schedule_id, slot_ms FROM schedule_fires
    WHERE status = 'pending' AND lease_until_ms < $2
    ORDER BY slot_ms, schedule_id LIMIT $4
    FOR UPDATE SKIP LOCKED
)
UPDATE schedule_fires f SET lease_owner = $1, lease_until_ms = $2 + $3
FROM due WHERE f.schedule_id = due.schedule_id AND f.slot_ms = due.slot_ms
RETURNING {", ".join("f." + c.strip() for c in storage.FIRE_COLUMNS.split(","))}
"""
_SETTLE = (
    "UPDATE schedule_fires SET status = $3, reason = $4, updated_ms = $5, lease_until_ms = 0"
    " WHERE schedule_id = $1 AND slot_ms = $2 AND status IN ('pending', 'started')"
    " AND ($6::text IS NULL OR lease_owner = $6 OR status = 'started')"
)
_RELEASE = (
    "UPDATE schedule_fires SET lease_owner = NULL, lease_until_ms = 0"
    " WHERE schedule_id = $1 AND slot_ms = $2 AND status = 'pending' AND lease_owner = $3"
)
_PRUNE = f"""
DELETE FROM schedule_fires f WHERE f.status IN {storage.SETTLED} AND f.slot_ms < (
    SELECT k.slot_ms FROM schedule_fires k WHERE k.schedule_id = f.schedule_id
    ORDER BY k.slot_ms DESC LIMIT 1 OFFSET $1
)
"""


class PgScheduleStorage:
    """A `ScheduleStorage` (`agentos.schedules.storage`) in PostgreSQL."""

    def __init__(self, config: StoreConfig) -> None:
        self._db = SidePool(config, "schedules")

    async def open(self) -> None:
        """Migrate (0014 among the rest), then open its pool. Raises: as `SidePool.open`."""
        await self._db.open()

    async def close(self) -> None:
        await self._db.close()

    async def _fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        return await self._db.fetch("schedules read", sql, *args)

    async def _execute(self, sql: str, *args: Any) -> int:
        return await self._db.execute("schedules write", sql, *args)

    async def create(self, schedule: ScheduleRow, *, max_per_tenant: int) -> None:
        async def create(conn: asyncpg.Connection) -> None:
            async with conn.transaction():
                await check_cap_pg(conn, "schedules", schedule.tenant_id, max_per_tenant)
                await conn.execute(_INSERT, *storage.schedule_values(schedule))

        await self._db.use(create, "schedule create")

    async def get(self, tenant_id: str, schedule_id: str) -> ScheduleRow | None:
        rows = await self._fetch(
            storage.SELECT_SCHEDULES + " WHERE schedule_id = $1 AND tenant_id = $2", schedule_id, tenant_id
        )
        return storage.schedule_row(rows[0]) if rows else None

    async def list_schedules(self, tenant_id: str) -> list[ScheduleRow]:
        rows = await self._fetch(
            storage.SELECT_SCHEDULES + " WHERE tenant_id = $1 ORDER BY created_ms, schedule_id", tenant_id
        )
        return [storage.schedule_row(r) for r in rows]

    async def delete(self, tenant_id: str, schedule_id: str) -> bool:
        async def delete(conn: asyncpg.Connection) -> bool:
            async with conn.transaction():
                sql = "DELETE FROM schedules WHERE schedule_id = $1 AND tenant_id = $2"
                if await conn.execute(sql, schedule_id, tenant_id) != "DELETE 1":
                    return False
                await conn.execute("DELETE FROM schedule_fires WHERE schedule_id = $1", schedule_id)
                return True

        return await self._db.use(delete, "schedule delete")

    async def set_paused(self, tenant_id: str, schedule_id: str, paused: bool, cursor_ms: int) -> ScheduleRow | None:
        sql = (
            f"UPDATE schedules SET paused = $3, cursor_ms = $4 WHERE schedule_id = $1 AND tenant_id = $2"
            f" RETURNING {storage.SCHEDULE_COLUMNS}"
        )
        rows = await self._fetch(sql, schedule_id, tenant_id, paused, cursor_ms)
        return storage.schedule_row(rows[0]) if rows else None

    async def due(self, now_ms: int, limit: int) -> list[ScheduleRow]:
        sql = (
            storage.SELECT_SCHEDULES + " WHERE NOT paused AND cursor_ms <= $1 ORDER BY cursor_ms, schedule_id LIMIT $2"
        )
        return [storage.schedule_row(r) for r in await self._fetch(sql, now_ms, limit)]

    async def advance(self, schedule: ScheduleRow, cursor_ms: int, fires: Sequence[FireRow], owner: str) -> bool:
        async def advance(conn: asyncpg.Connection) -> bool:
            async with conn.transaction():
                await conn.execute("SET LOCAL synchronous_commit = on")
                sql = "UPDATE schedules SET cursor_ms = $1 WHERE schedule_id = $2 AND cursor_ms = $3 AND NOT paused"
                if await conn.execute(sql, cursor_ms, schedule.schedule_id, schedule.cursor_ms) != "UPDATE 1":
                    return False
                rows = [(*storage.fire_values(f), owner, f.updated_ms + storage.FIRE_LEASE_MS) for f in fires]
                await conn.executemany(_INSERT_FIRE, rows)
                return True

        return await self._db.use(advance, "schedule advance")

    async def active(self, schedule_id: str) -> list[FireRow]:
        sql = storage.SELECT_FIRES + " WHERE schedule_id = $1 AND status IN ('pending', 'started') ORDER BY slot_ms"
        return [storage.fire_row(r) for r in await self._fetch(sql, schedule_id)]

    async def next_work(self, now_ms: int) -> NextWork:
        sql = (
            "SELECT (SELECT min(cursor_ms) FROM schedules WHERE NOT paused),"
            " EXISTS (SELECT 1 FROM schedule_fires WHERE status = 'pending'),"
            " (SELECT min(lease_until_ms) FROM schedule_fires WHERE status = 'pending' AND lease_until_ms >= $1)"
        )
        earliest, busy, lease_end = (await self._fetch(sql, now_ms))[0]
        return NextWork(earliest, bool(busy), None if lease_end is None else lease_end + 1)

    async def claim(self, owner: str, now_ms: int, lease_ms: int, limit: int) -> list[FireRow]:
        rows = await self._db.use(lambda conn: conn.fetch(_CLAIM, owner, now_ms, lease_ms, limit), "fire claim")
        return sorted(
            (storage.fire_row(r) for r in rows), key=lambda f: (f.slot_ms, f.schedule_id)
        )  # RETURNING has no order

    async def settle(
        self, fire: FireRow, status: FireStatus, owner: str | None, now_ms: int, reason: str | None = None
    ) -> None:
        await self._execute(_SETTLE, fire.schedule_id, fire.slot_ms, status, reason, now_ms, owner)

    async def release(self, fire: FireRow, owner: str) -> None:
        await self._execute(_RELEASE, fire.schedule_id, fire.slot_ms, owner)

    async def fires(self, tenant_id: str, schedule_id: str, limit: int) -> list[FireRow]:
        sql = storage.SELECT_FIRES + " WHERE schedule_id = $1 AND tenant_id = $2 ORDER BY slot_ms DESC LIMIT $3"
        return [storage.fire_row(r) for r in await self._fetch(sql, schedule_id, tenant_id, limit)]

    async def prune(self, keep: int) -> int:
        return await self._execute(_PRUNE, keep - 1)
