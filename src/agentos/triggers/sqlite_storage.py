"""`triggers.db`: triggers and their deliveries in SQLite, through the project's one writer.

Why a 2xx after `accept` is safe here. The writer (`agentos.store.writer.Writer`) applies a
batch of operations in one transaction, runs COMMIT (`agentos.store.ops._transaction`), and
only then posts the futures' results to the loop (`Writer._apply` -> `post(..., _resolve)`):
`submit(...)` resolves after the COMMIT of the batch that holds the operation, never before.
This file's connection has `synchronous=FULL`, so in WAL mode that COMMIT has fsynced the WAL:
the delivery survives a kill -9 and a power cut. Group commit (several accepts sharing a batch)
only delays the answer until the shared COMMIT; it never acknowledges an unflushed row, so it
is not the "batched writer that acks before it flushes" pitfall. A batch whose COMMIT fails is
rolled back and applied again once (`ops.apply_batch`); every operation here is safe to repeat.

Each read-then-write (`accept`, `claim`, `create_trigger`'s count) runs as one `apply` in the
writer thread, inside its transaction: nothing else touches the file in between.

Leases: `claim` leases a delivery to an owner; `mark_started`, `postpone` and `mark_failed`
change it only while that owner still holds the lease (a node whose lease expired and was
taken over changes nothing: the new owner decides). A claimed delivery stays `queued` until
then, so it counts in the backlog and is claimed again once its lease expires.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path

from agentos.clock import wall_ms
from agentos.errors import Conflict
from agentos.store.tenant_cap import check_cap_sqlite
from agentos.store.writer import Writer
from agentos.store.writer_storage import WriterStorage, one_row
from agentos.triggers import storage
from agentos.triggers.records import MAX_POSTPONED_TENANTS, Backlog, DeliveryQuery, DeliveryRow, SecretRow, TriggerRow

SCHEMA = """
CREATE TABLE IF NOT EXISTS triggers (
    trigger_id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    agent TEXT NOT NULL,
    input_template TEXT NOT NULL,
    description TEXT NOT NULL,
    enabled INTEGER NOT NULL,
    secrets TEXT NOT NULL,
    created_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS triggers_by_tenant ON triggers (tenant_id, created_ms);
CREATE TABLE IF NOT EXISTS deliveries (
    trigger_id TEXT NOT NULL,
    webhook_id TEXT NOT NULL,
    tenant_id TEXT NOT NULL,
    run_id TEXT NOT NULL UNIQUE,
    payload BLOB NOT NULL,
    received_ms INTEGER NOT NULL,
    status TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    next_attempt_ms INTEGER NOT NULL,
    lease_owner TEXT,
    lease_until_ms INTEGER,
    reason TEXT,
    updated_ms INTEGER NOT NULL,
    PRIMARY KEY (trigger_id, webhook_id)
);
CREATE INDEX IF NOT EXISTS deliveries_to_claim ON deliveries (status, next_attempt_ms);
CREATE INDEX IF NOT EXISTS deliveries_by_trigger ON deliveries (trigger_id, received_ms);
"""

_INSERT_TRIGGER = f"INSERT INTO triggers ({storage.TRIGGER_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
_SELECT_DELIVERY = f"SELECT {storage.DELIVERY_COLUMNS} FROM deliveries"
_INSERT_DELIVERY = (
    f"INSERT INTO deliveries ({storage.DELIVERY_COLUMNS}, updated_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (trigger_id, webhook_id) DO NOTHING"
)
_DUE = (
    "SELECT trigger_id, webhook_id FROM deliveries WHERE status = 'queued' AND next_attempt_ms <= ?"
    " AND (lease_until_ms IS NULL OR lease_until_ms < ?) ORDER BY received_ms, trigger_id, webhook_id LIMIT ?"
)
# A leased delivery can be claimed once its lease is over (`lease_until_ms < now`).
_BACKLOG = (
    "SELECT count(*), min(max(next_attempt_ms, coalesce(lease_until_ms + 1, 0)))"
    " FROM deliveries WHERE status = 'queued'"
)
# Tried and put back to wait: queued, unleased, attempted (a claim counts the attempt).
_POSTPONED_TENANTS = (
    "SELECT DISTINCT tenant_id FROM deliveries"
    " WHERE status = 'queued' AND lease_until_ms IS NULL AND attempts > 0 LIMIT ?"
)
_REQUEUE = (
    "UPDATE deliveries SET status = 'queued', reason = NULL, attempts = 0, next_attempt_ms = ?, updated_ms = ?"
    " WHERE tenant_id = ? AND trigger_id = ? AND webhook_id = ? AND status = 'failed'"
)
# Postponed (queued, unleased, not yet due): the oldest first, as `_DUE` claims them.
_HURRY = (
    "UPDATE deliveries SET next_attempt_ms = ?, updated_ms = ? WHERE rowid IN (SELECT rowid FROM deliveries"
    " WHERE status = 'queued' AND next_attempt_ms > ? AND lease_until_ms IS NULL AND (? IS NULL OR tenant_id = ?)"
    " ORDER BY received_ms, trigger_id, webhook_id LIMIT ?)"
)
_LEASE = (
    "UPDATE deliveries SET lease_owner = ?, lease_until_ms = ?, attempts = attempts + 1, updated_ms = ?"
    " WHERE trigger_id = ? AND webhook_id = ?"
)
# Only the lease's owner moves a claimed delivery on.
_BY_OWNER = " WHERE trigger_id = ? AND webhook_id = ? AND lease_owner = ? AND status = 'queued'"
_STARTED = "UPDATE deliveries SET status = 'started', lease_owner = NULL, lease_until_ms = NULL, updated_ms = ?"
_POSTPONED = "UPDATE deliveries SET next_attempt_ms = ?, lease_owner = NULL, lease_until_ms = NULL, updated_ms = ?"
_FAILED = (
    "UPDATE deliveries SET status = 'failed', reason = ?, lease_owner = NULL, lease_until_ms = NULL, updated_ms = ?"
)


class SqliteTriggerStorage(WriterStorage):
    """A `TriggerStorage` (`agentos.triggers.storage`) in `path` (None: in memory)."""

    def __init__(self, path: Path | None) -> None:
        super().__init__(Writer("triggers", path, SCHEMA, synchronous="full", queue_max_rows=10_000))

    # -- triggers ------------------------------------------------------------------------------

    async def create_trigger(self, trigger: TriggerRow, *, max_per_tenant: int) -> None:
        """Raises: Conflict (`too_many_triggers`; `trigger_exists` for a taken id)."""

        def create(db: sqlite3.Connection) -> None:
            check_cap_sqlite(db, "triggers", trigger.tenant_id, max_per_tenant)
            try:
                db.execute(_INSERT_TRIGGER, storage.trigger_values(trigger))
            except sqlite3.IntegrityError:
                raise Conflict(f"trigger {trigger.trigger_id!r} exists", code="trigger_exists") from None

        await self._writer.run(create)

    async def get_trigger(self, tenant_id: str, trigger_id: str) -> TriggerRow | None:
        sql = storage.SELECT_TRIGGERS + " WHERE trigger_id = ? AND tenant_id = ?"
        return await self._writer.run(lambda db: one_row(db, sql, (trigger_id, tenant_id), storage.trigger_row))

    async def find_trigger(self, trigger_id: str) -> TriggerRow | None:
        return await self._writer.run(
            lambda db: one_row(
                db, storage.SELECT_TRIGGERS + " WHERE trigger_id = ?", (trigger_id,), storage.trigger_row
            )
        )

    async def list_triggers(self, tenant_id: str) -> list[TriggerRow]:
        sql = storage.SELECT_TRIGGERS + " WHERE tenant_id = ? ORDER BY created_ms, trigger_id"
        return await self._writer.run(lambda db: [storage.trigger_row(r) for r in db.execute(sql, (tenant_id,))])

    async def set_secrets(self, tenant_id: str, trigger_id: str, secrets: Sequence[SecretRow]) -> bool:
        sql = "UPDATE triggers SET secrets = ? WHERE trigger_id = ? AND tenant_id = ?"
        params = (storage.encode_secrets(secrets), trigger_id, tenant_id)
        return await self._writer.run(lambda db: db.execute(sql, params).rowcount == 1)

    async def delete_trigger(self, tenant_id: str, trigger_id: str) -> bool:
        sql = "DELETE FROM triggers WHERE trigger_id = ? AND tenant_id = ?"
        return await self._writer.run(lambda db: db.execute(sql, (trigger_id, tenant_id)).rowcount == 1)

    # -- deliveries ----------------------------------------------------------------------------

    async def accept(self, delivery: DeliveryRow) -> tuple[DeliveryRow, bool]:
        """Resolves after the COMMIT (synchronous=FULL) holding the row: see the module's docstring."""
        d = delivery

        def accept(db: sqlite3.Connection) -> tuple[DeliveryRow, bool]:
            if db.execute(_INSERT_DELIVERY, (*storage.delivery_values(d), d.received_ms)).rowcount == 1:
                return d, True
            sql = _SELECT_DELIVERY + " WHERE trigger_id = ? AND webhook_id = ?"
            stored = one_row(db, sql, _key(d), storage.delivery_row)
            assert stored is not None  # the conflicting row, read in the same transaction
            return stored, False

        await self._writer.wait_space()
        return await self._writer.run(accept)

    async def get_delivery(self, tenant_id: str, trigger_id: str, webhook_id: str) -> DeliveryRow | None:
        sql = _SELECT_DELIVERY + " WHERE trigger_id = ? AND webhook_id = ? AND tenant_id = ?"
        key = (trigger_id, webhook_id, tenant_id)
        return await self._writer.run(lambda db: one_row(db, sql, key, storage.delivery_row))

    async def list_deliveries(self, tenant_id: str, trigger_id: str, query: DeliveryQuery) -> list[DeliveryRow]:
        sql = (
            _SELECT_DELIVERY
            + " WHERE trigger_id = ? AND tenant_id = ? AND received_ms < ? AND (? IS NULL OR status = ?)"
            " ORDER BY received_ms DESC, webhook_id DESC LIMIT ?"
        )
        before_ms = query.before_ms if query.before_ms is not None else 2**62
        params = (trigger_id, tenant_id, before_ms, query.status, query.status, query.limit)
        return await self._writer.run(lambda db: [storage.delivery_row(r) for r in db.execute(sql, params)])

    async def claim(self, owner: str, now_ms: int, lease_ms: int, limit: int) -> list[DeliveryRow]:
        """Due, unleased (or lease expired) deliveries, oldest first; a delivery still leased to
        `owner` itself is not claimed again before its lease expires either."""

        def claim(db: sqlite3.Connection) -> list[DeliveryRow]:
            keys = db.execute(_DUE, (now_ms, now_ms, limit)).fetchall()
            db.executemany(_LEASE, [(owner, now_ms + lease_ms, now_ms, t, w) for t, w in keys])
            where = " WHERE trigger_id = ? AND webhook_id = ?"
            return [storage.delivery_row(db.execute(_SELECT_DELIVERY + where, key).fetchone()) for key in keys]

        return await self._writer.run(claim)

    async def mark_started(self, owner: str, trigger_id: str, webhook_id: str, now_ms: int) -> None:
        """Only while `owner` holds the lease (else nothing changes)."""
        await self._writer.submit(_STARTED + _BY_OWNER, (now_ms, trigger_id, webhook_id, owner))

    async def postpone(self, owner: str, trigger_id: str, webhook_id: str, next_attempt_ms: int) -> None:
        """Only while `owner` holds the lease (else nothing changes)."""
        params = (next_attempt_ms, wall_ms(), trigger_id, webhook_id, owner)
        await self._writer.submit(_POSTPONED + _BY_OWNER, params)

    async def mark_failed(self, owner: str, trigger_id: str, webhook_id: str, reason: str, now_ms: int) -> None:
        """Only while `owner` holds the lease (else nothing changes)."""
        await self._writer.submit(_FAILED + _BY_OWNER, (reason, now_ms, trigger_id, webhook_id, owner))

    async def requeue_failed(self, tenant_id: str, trigger_id: str, webhook_id: str, now_ms: int) -> DeliveryRow | None:
        def requeue(db: sqlite3.Connection) -> DeliveryRow | None:
            if not db.execute(_REQUEUE, (now_ms, now_ms, tenant_id, trigger_id, webhook_id)).rowcount:
                return None
            where = " WHERE trigger_id = ? AND webhook_id = ?"
            return one_row(db, _SELECT_DELIVERY + where, (trigger_id, webhook_id), storage.delivery_row)

        return await self._writer.run(requeue)  # one writer call: the row before any claim

    async def hurry(self, tenant_id: str | None, now_ms: int, limit: int) -> int:
        params = (now_ms, wall_ms(), now_ms, tenant_id, tenant_id, limit)
        return await self._writer.run(lambda db: db.execute(_HURRY, params).rowcount)

    async def backlog(self) -> Backlog:
        def read(db: sqlite3.Connection) -> Backlog:
            queued, due = db.execute(_BACKLOG).fetchone()
            tenants = db.execute(_POSTPONED_TENANTS, (MAX_POSTPONED_TENANTS,)).fetchall() if queued else []
            return Backlog(queued, due, tuple(tenant for (tenant,) in tenants))

        return await self._writer.run(read)

    async def prune(self, before_ms: int) -> int:
        sql = "DELETE FROM deliveries WHERE received_ms < ? AND status <> 'queued'"
        return await self._writer.run(lambda db: db.execute(sql, (before_ms,)).rowcount)


def _key(d: DeliveryRow) -> tuple[str, str]:
    return d.trigger_id, d.webhook_id
