"""`schedules.db`: schedules and their fires in SQLite, through the project's one writer
(`agentos.store.writer.Writer`, `synchronous=FULL`: a fire's row is on disk before its run starts).

One node owns the file, so the races `ScheduleStorage` guards against (two nodes deciding a
slot) cannot happen here; the same statements still make them harmless: each read-then-write
(`advance`, `claim`, `create`'s count) is one `apply` in the writer thread, inside one
transaction, and a fire is inserted under its unique key with `ON CONFLICT DO NOTHING`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path

from agentos.schedules import storage
from agentos.schedules.records import FireRow, FireStatus, NextWork, ScheduleRow
from agentos.store.tenant_cap import check_cap_sqlite
from agentos.store.writer import Writer
from agentos.store.writer_storage import WriterStorage, one_row

SCHEMA = """
CREATE TABLE IF NOT EXISTS schedules (
    schedule_id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    agent TEXT NOT NULL,
    input TEXT NOT NULL,
    cron TEXT,
    zone TEXT NOT NULL,
    every_s INTEGER,
    max_runs_in_flight INTEGER NOT NULL,
    overlap TEXT NOT NULL,
    misfire TEXT NOT NULL,
    paused INTEGER NOT NULL,
    created_ms INTEGER NOT NULL,
    cursor_ms INTEGER NOT NULL,
    owner TEXT
);
CREATE INDEX IF NOT EXISTS schedules_by_tenant ON schedules (tenant_id, created_ms);
CREATE INDEX IF NOT EXISTS schedules_due ON schedules (paused, cursor_ms);
CREATE TABLE IF NOT EXISTS schedule_fires (
    schedule_id TEXT NOT NULL,
    slot_ms INTEGER NOT NULL,
    tenant_id TEXT NOT NULL,
    run_id TEXT NOT NULL UNIQUE,
    status TEXT NOT NULL,
    updated_ms INTEGER NOT NULL,
    reason TEXT,
    lease_owner TEXT,  -- pending: the node starting it, until lease_until_ms; then the node that started it
    lease_until_ms INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (schedule_id, slot_ms)
);
CREATE INDEX IF NOT EXISTS schedule_fires_to_claim ON schedule_fires (status, lease_until_ms);
"""

_INSERT, _INSERT_FIRE = storage.inserts(lambda _: "?")
_KEY = " WHERE schedule_id = ? AND slot_ms = ?"
_HELD = _KEY + " AND status = 'pending' AND (? IS NULL OR lease_owner = ?)"
_PRUNE = f"""
DELETE FROM schedule_fires AS f WHERE f.status IN {storage.SETTLED} AND f.slot_ms < (
    SELECT k.slot_ms FROM schedule_fires AS k WHERE k.schedule_id = f.schedule_id
    ORDER BY k.slot_ms DESC LIMIT 1 OFFSET ?
)
"""


def _migrate(conn: sqlite3.Connection) -> None:
    """Files made before owners (issue 30) lack the column: add it (old schedules: a tenant key's)."""
    columns = {row[1] for row in conn.execute("PRAGMA table_info(schedules)")}
    if "owner" not in columns:
        conn.execute("ALTER TABLE schedules ADD COLUMN owner TEXT")


class SqliteScheduleStorage(WriterStorage):
    """A `ScheduleStorage` (`agentos.schedules.storage`) in `path` (None: in memory)."""

    def __init__(self, path: Path | None) -> None:
        super().__init__(Writer("schedules", path, SCHEMA, migrate=_migrate, synchronous="full", queue_max_rows=10_000))

    async def create(self, schedule: ScheduleRow, *, max_per_tenant: int) -> None:
        def create(db: sqlite3.Connection) -> None:
            check_cap_sqlite(db, "schedules", schedule.tenant_id, max_per_tenant)
            db.execute(_INSERT, storage.schedule_values(schedule))

        await self._writer.run(create)

    async def get(self, tenant_id: str, schedule_id: str) -> ScheduleRow | None:
        sql = storage.SELECT_SCHEDULES + " WHERE schedule_id = ? AND tenant_id = ?"
        return await self._writer.run(lambda db: one_row(db, sql, (schedule_id, tenant_id), storage.schedule_row))

    async def list_schedules(self, tenant_id: str) -> list[ScheduleRow]:
        sql = storage.SELECT_SCHEDULES + " WHERE tenant_id = ? ORDER BY created_ms, schedule_id"
        return await self._writer.run(lambda db: [storage.schedule_row(r) for r in db.execute(sql, (tenant_id,))])

    async def delete(self, tenant_id: str, schedule_id: str) -> bool:
        def delete(db: sqlite3.Connection) -> bool:
            sql = "DELETE FROM schedules WHERE schedule_id = ? AND tenant_id = ?"
            if db.execute(sql, (schedule_id, tenant_id)).rowcount != 1:
                return False
            db.execute("DELETE FROM schedule_fires WHERE schedule_id = ?", (schedule_id,))
            return True

        return await self._writer.run(delete)

    async def set_paused(self, tenant_id: str, schedule_id: str, paused: bool, cursor_ms: int) -> ScheduleRow | None:
        def update(db: sqlite3.Connection) -> ScheduleRow | None:
            sql = "UPDATE schedules SET paused = ?, cursor_ms = ? WHERE schedule_id = ? AND tenant_id = ?"
            db.execute(sql, (paused, cursor_ms, schedule_id, tenant_id))
            return one_row(
                db,
                storage.SELECT_SCHEDULES + " WHERE schedule_id = ? AND tenant_id = ?",
                (schedule_id, tenant_id),
                storage.schedule_row,
            )

        return await self._writer.run(update)

    async def due(self, now_ms: int, limit: int) -> list[ScheduleRow]:
        sql = storage.SELECT_SCHEDULES + " WHERE paused = 0 AND cursor_ms <= ? ORDER BY cursor_ms, schedule_id LIMIT ?"
        return await self._writer.run(lambda db: [storage.schedule_row(r) for r in db.execute(sql, (now_ms, limit))])

    async def advance(self, schedule: ScheduleRow, cursor_ms: int, fires: Sequence[FireRow], owner: str) -> bool:
        def advance(db: sqlite3.Connection) -> bool:
            sql = "UPDATE schedules SET cursor_ms = ? WHERE schedule_id = ? AND cursor_ms = ? AND paused = 0"
            if db.execute(sql, (cursor_ms, schedule.schedule_id, schedule.cursor_ms)).rowcount != 1:
                return False
            rows = [(*storage.fire_values(f), owner, f.updated_ms + storage.FIRE_LEASE_MS) for f in fires]
            db.executemany(_INSERT_FIRE, rows)
            return True

        return await self._writer.run(advance)

    async def active(self, schedule_id: str) -> list[FireRow]:
        sql = storage.SELECT_FIRES + " WHERE schedule_id = ? AND status IN ('pending', 'started') ORDER BY slot_ms"
        return await self._writer.run(lambda db: [storage.fire_row(r) for r in db.execute(sql, (schedule_id,))])

    async def next_work(self, now_ms: int) -> NextWork:
        sql = (
            "SELECT (SELECT min(cursor_ms) FROM schedules WHERE paused = 0),"
            " EXISTS (SELECT 1 FROM schedule_fires WHERE status = 'pending'),"
            " (SELECT min(lease_until_ms) FROM schedule_fires WHERE status = 'pending' AND lease_until_ms >= ?)"
        )
        earliest, busy, lease_end = await self._writer.run(lambda db: db.execute(sql, (now_ms,)).fetchone())
        return NextWork(earliest, bool(busy), None if lease_end is None else lease_end + 1)

    async def claim(self, owner: str, now_ms: int, lease_ms: int, limit: int) -> list[FireRow]:
        def claim(db: sqlite3.Connection) -> list[FireRow]:
            sql = (
                storage.SELECT_FIRES
                + " WHERE status = 'pending' AND lease_until_ms < ? ORDER BY slot_ms, schedule_id LIMIT ?"
            )
            found = [storage.fire_row(r) for r in db.execute(sql, (now_ms, limit))]
            lease = "UPDATE schedule_fires SET lease_owner = ?, lease_until_ms = ?" + _KEY
            db.executemany(lease, [(owner, now_ms + lease_ms, f.schedule_id, f.slot_ms) for f in found])
            return found

        return await self._writer.run(claim)

    async def settle(
        self, fire: FireRow, status: FireStatus, owner: str | None, now_ms: int, reason: str | None = None
    ) -> None:
        sql = "UPDATE schedule_fires SET status = ?, reason = ?, updated_ms = ?, lease_until_ms = 0"
        where = _KEY + " AND status IN ('pending', 'started') AND (? IS NULL OR lease_owner = ? OR status = 'started')"
        params = (status, reason, now_ms, fire.schedule_id, fire.slot_ms, owner, owner)
        await self._writer.submit(sql + where, params)

    async def release(self, fire: FireRow, owner: str) -> None:
        sql = "UPDATE schedule_fires SET lease_owner = NULL, lease_until_ms = 0" + _HELD
        await self._writer.submit(sql, (fire.schedule_id, fire.slot_ms, owner, owner))

    async def fires(self, tenant_id: str, schedule_id: str, limit: int) -> list[FireRow]:
        sql = storage.SELECT_FIRES + " WHERE schedule_id = ? AND tenant_id = ? ORDER BY slot_ms DESC LIMIT ?"
        return await self._writer.run(
            lambda db: [storage.fire_row(r) for r in db.execute(sql, (schedule_id, tenant_id, limit))]
        )

    async def prune(self, keep: int) -> int:
        return await self._writer.run(lambda db: db.execute(_PRUNE, (keep - 1,)).rowcount)
