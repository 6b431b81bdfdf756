"""Triggers and their deliveries in the store's PostgreSQL database (migration 0007): every node
shares the triggers, the dedup keys and the queue of deliveries.

Durability: `accept` is one transaction that sets `synchronous_commit = on` for itself, so its
COMMIT has reached the server's WAL on disk (and its synchronous standbys, if any) before it
returns, even on a server configured with `synchronous_commit = off`: a 2xx is only ever sent
for a delivery that survives a crash of the database server.

Several nodes' dispatchers share the queue: `claim` locks the due rows it takes with
`FOR UPDATE SKIP LOCKED` (another node's claim running at the same moment skips them, and a
row committed as leased meanwhile is re-checked against the lease condition) and leases them
in the same statement, so no delivery is claimed by two nodes at once. The lease times are the
callers' clocks (`now_ms`), as the protocol has them; nodes' clocks are assumed close.

Leases: `mark_started`, `postpone` and `mark_failed` change a delivery only while the given owner
holds its lease (an owner whose lease expired and was taken over changes nothing).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from agentos.clock import wall_ms
from agentos.errors import Conflict
from agentos.store import pg_pool
from agentos.store.pg_side_pool import SidePool
from agentos.store.tenant_cap import check_cap_pg
from agentos.triggers.records import MAX_POSTPONED_TENANTS, Backlog, DeliveryQuery, DeliveryRow, SecretRow, TriggerRow
from agentos.triggers.storage import (
    DELIVERY_COLUMNS,
    SELECT_TRIGGERS,
    TRIGGER_COLUMNS,
    delivery_row,
    delivery_values,
    encode_secrets,
    trigger_row,
    trigger_values,
)

if TYPE_CHECKING:
    import asyncpg

    from agentos.config import StoreConfig

T = TypeVar("T")

_SELECT_DELIVERY = f"SELECT {DELIVERY_COLUMNS} FROM trigger_deliveries"
_INSERT_TRIGGER = f"INSERT INTO triggers ({TRIGGER_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8)"
_INSERT_DELIVERY = (
    f"INSERT INTO trigger_deliveries ({DELIVERY_COLUMNS}, updated_ms)"
    " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
    f" ON CONFLICT (trigger_id, webhook_id) DO NOTHING RETURNING {DELIVERY_COLUMNS}"
)
_CLAIM = f"""
WITH due AS MATERIALIZED (
    SELECT trigger_id, webhook_id FROM trigger_deliveries
    WHERE status = 'queued' AND next_attempt_ms <= $2 AND (lease_until_ms IS NULL OR lease_until_ms < $2)
    ORDER BY received_ms, trigger_id, webhook_id LIMIT $4
    FOR UPDATE SKIP LOCKED
)
UPDATE trigger_deliveries d SET lease_owner = $1, lease_until_ms = $2 + $3, attempts = d.attempts + 1,
    updated_ms = $2
FROM due WHERE d.trigger_id = due.trigger_id AND d.webhook_id = due.webhook_id
RETURNING {", ".join("d." + c.strip() for c in DELIVERY_COLUMNS.split(","))}
"""
# A leased delivery can be claimed once its lease is over (`lease_until_ms < now`).
_BACKLOG = (
    "SELECT count(*), min(GREATEST(next_attempt_ms, COALESCE(lease_until_ms + 1, 0)))"
    " FROM trigger_deliveries WHERE status = 'queued'"
)
# Tried and put back to wait: queued, unleased, attempted (a claim counts the attempt).
_POSTPONED_TENANTS = (
    "SELECT DISTINCT tenant_id FROM trigger_deliveries"
    " WHERE status = 'queued' AND lease_until_ms IS NULL AND attempts > 0 LIMIT $1"
)
_REQUEUE = (
    "UPDATE trigger_deliveries SET status = 'queued', reason = NULL, attempts = 0, next_attempt_ms = $1,"
    " updated_ms = $1 WHERE tenant_id = $2 AND trigger_id = $3 AND webhook_id = $4 AND status = 'failed'"
    f" RETURNING {DELIVERY_COLUMNS}"
)
# Postponed (queued, unleased, not yet due): the oldest first, as `_CLAIM` takes them.
_HURRY = """
WITH late AS MATERIALIZED (
    SELECT trigger_id, webhook_id FROM trigger_deliveries
    WHERE status = 'queued' AND next_attempt_ms > $1 AND lease_until_ms IS NULL AND ($3::text IS NULL OR tenant_id = $3)
    ORDER BY received_ms, trigger_id, webhook_id LIMIT $4
    FOR UPDATE SKIP LOCKED
)
UPDATE trigger_deliveries d SET next_attempt_ms = $1, updated_ms = $2
FROM late WHERE d.trigger_id = late.trigger_id AND d.webhook_id = late.webhook_id
"""
_RELEASE = "UPDATE trigger_deliveries SET lease_owner = NULL, lease_until_ms = NULL, updated_ms = $1"
# Only the lease's owner moves a claimed delivery on.
_BY_OWNER = " WHERE trigger_id = $2 AND webhook_id = $3 AND lease_owner = $4 AND status = 'queued'"
_STARTED = _RELEASE + ", status = 'started'" + _BY_OWNER
_POSTPONED = _RELEASE + ", next_attempt_ms = $5" + _BY_OWNER
_FAILED = _RELEASE + ", status = 'failed', reason = $5" + _BY_OWNER


class PgTriggerStorage:
    """A `TriggerStorage` (`agentos.triggers.storage`) in PostgreSQL."""

    def __init__(self, config: StoreConfig) -> None:
        self._db = SidePool(config, "triggers")

    async def open(self) -> None:
        """Migrate, then open a small pool (`agentos.store.pg_side_pool`).

        Raises:
            ConfigError: naming store.postgres_url (unreachable, a schema mismatch) or store.backend (no asyncpg).
        """
        await self._db.open()

    async def close(self) -> None:
        await self._db.close()

    async def _bounded(self, use: Callable[[asyncpg.Connection], Awaitable[T]], what: str) -> T:
        return await self._db.use(use, what)

    async def _fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        return await self._db.fetch("triggers read", sql, *args)

    async def _execute(self, sql: str, *args: Any) -> int:
        """The number of rows `sql` changed."""
        return await self._db.execute("triggers write", sql, *args)

    # -- triggers ------------------------------------------------------------------------------

    async def create_trigger(self, trigger: TriggerRow, *, max_per_tenant: int) -> None:
        """Raises: Conflict (`too_many_triggers`; `trigger_exists` for a taken id)."""
        driver = pg_pool.import_asyncpg()

        async def create(conn: asyncpg.Connection) -> None:
            async with conn.transaction():
                await check_cap_pg(conn, "triggers", trigger.tenant_id, max_per_tenant)
                try:
                    await conn.execute(_INSERT_TRIGGER, *trigger_values(trigger))
                except driver.UniqueViolationError:
                    raise Conflict(f"trigger {trigger.trigger_id!r} exists", code="trigger_exists") from None

        await self._bounded(create, "trigger create")

    async def get_trigger(self, tenant_id: str, trigger_id: str) -> TriggerRow | None:
        rows = await self._fetch(SELECT_TRIGGERS + " WHERE trigger_id = $1 AND tenant_id = $2", trigger_id, tenant_id)
        return trigger_row(rows[0]) if rows else None

    async def find_trigger(self, trigger_id: str) -> TriggerRow | None:
        rows = await self._fetch(SELECT_TRIGGERS + " WHERE trigger_id = $1", trigger_id)
        return trigger_row(rows[0]) if rows else None

    async def list_triggers(self, tenant_id: str) -> list[TriggerRow]:
        rows = await self._fetch(SELECT_TRIGGERS + " WHERE tenant_id = $1 ORDER BY created_ms, trigger_id", tenant_id)
        return [trigger_row(r) for r in rows]

    async def set_secrets(self, tenant_id: str, trigger_id: str, secrets: Sequence[SecretRow]) -> bool:
        sql = "UPDATE triggers SET secrets = $1::jsonb WHERE trigger_id = $2 AND tenant_id = $3"
        return await self._execute(sql, encode_secrets(secrets), trigger_id, tenant_id) == 1

    async def delete_trigger(self, tenant_id: str, trigger_id: str) -> bool:
        return (
            await self._execute("DELETE FROM triggers WHERE trigger_id = $1 AND tenant_id = $2", trigger_id, tenant_id)
            == 1
        )

    # -- deliveries ----------------------------------------------------------------------------

    async def accept(self, delivery: DeliveryRow) -> tuple[DeliveryRow, bool]:
        """Returns after a synchronous COMMIT (see the module's docstring)."""
        d = delivery

        async def accept(conn: asyncpg.Connection) -> tuple[DeliveryRow, bool]:
            while True:
                async with conn.transaction():
                    await conn.execute("SET LOCAL synchronous_commit = on")
                    inserted = await conn.fetchrow(_INSERT_DELIVERY, *delivery_values(d), d.received_ms)
                if inserted is not None:
                    return delivery_row(inserted), True
                where = " WHERE trigger_id = $1 AND webhook_id = $2"
                stored = await conn.fetchrow(_SELECT_DELIVERY + where, d.trigger_id, d.webhook_id)
                if stored is not None:
                    return delivery_row(stored), False
                # pruned between the two statements (past its horizon): accept it as new

        return await self._bounded(accept, "delivery accept")

    async def get_delivery(self, tenant_id: str, trigger_id: str, webhook_id: str) -> DeliveryRow | None:
        where = " WHERE trigger_id = $1 AND webhook_id = $2 AND tenant_id = $3"
        rows = await self._fetch(_SELECT_DELIVERY + where, trigger_id, webhook_id, tenant_id)
        return delivery_row(rows[0]) if rows else None

    async def list_deliveries(self, tenant_id: str, trigger_id: str, query: DeliveryQuery) -> list[DeliveryRow]:
        sql = (
            _SELECT_DELIVERY + " WHERE trigger_id = $1 AND tenant_id = $2 AND ($3::bigint IS NULL OR received_ms < $3)"
            " AND ($5::text IS NULL OR status = $5) ORDER BY received_ms DESC, webhook_id DESC LIMIT $4"
        )
        rows = await self._fetch(sql, trigger_id, tenant_id, query.before_ms, query.limit, query.status)
        return [delivery_row(r) for r in rows]

    async def claim(self, owner: str, now_ms: int, lease_ms: int, limit: int) -> list[DeliveryRow]:
        """Due, unleased (or lease expired) deliveries, oldest first; a delivery still leased to
        `owner` itself is not claimed again before its lease expires either."""
        rows = await self._bounded(lambda conn: conn.fetch(_CLAIM, owner, now_ms, lease_ms, limit), "delivery claim")
        claimed = [delivery_row(r) for r in rows]
        claimed.sort(key=lambda r: (r.received_ms, r.trigger_id, r.webhook_id))  # RETURNING has no order
        return claimed

    async def mark_started(self, owner: str, trigger_id: str, webhook_id: str, now_ms: int) -> None:
        """Only while `owner` holds the lease (else nothing changes)."""
        await self._execute(_STARTED, now_ms, trigger_id, webhook_id, owner)

    async def postpone(self, owner: str, trigger_id: str, webhook_id: str, next_attempt_ms: int) -> None:
        """Only while `owner` holds the lease (else nothing changes)."""
        await self._execute(_POSTPONED, wall_ms(), trigger_id, webhook_id, owner, next_attempt_ms)

    async def mark_failed(self, owner: str, trigger_id: str, webhook_id: str, reason: str, now_ms: int) -> None:
        """Only while `owner` holds the lease (else nothing changes)."""
        await self._execute(_FAILED, now_ms, trigger_id, webhook_id, owner, reason)

    async def requeue_failed(self, tenant_id: str, trigger_id: str, webhook_id: str, now_ms: int) -> DeliveryRow | None:
        rows = await self._fetch(_REQUEUE, now_ms, tenant_id, trigger_id, webhook_id)
        return delivery_row(rows[0]) if rows else None

    async def hurry(self, tenant_id: str | None, now_ms: int, limit: int) -> int:
        return await self._execute(_HURRY, now_ms, wall_ms(), tenant_id, limit)

    async def backlog(self) -> Backlog:
        queued, due = (await self._fetch(_BACKLOG))[0]
        tenants = await self._fetch(_POSTPONED_TENANTS, MAX_POSTPONED_TENANTS) if queued else []
        return Backlog(queued, due, tuple(row[0] for row in tenants))

    async def prune(self, before_ms: int) -> int:
        return await self._execute(
            "DELETE FROM trigger_deliveries WHERE received_ms < $1 AND status <> 'queued'", before_ms
        )
