"""Where triggers and deliveries live: the `TriggerStorage` protocol.

Two implementations pass the same contract tests: `SqliteTriggerStorage` (`triggers.db`, its own
writer with `synchronous=FULL`) and `PgTriggerStorage` (migration 0007, the PostgreSQL store's
database). `accept` returns only once the delivery is committed durably: that commit is what a
2xx promises.

Tenancy: trigger reads and writes a request can reach name the tenant, except `find_trigger`,
which a delivery uses (it carries no key: its signature is checked against the trigger's
secrets right after). The dispatcher's `claim` works across tenants; each row names its tenant.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter
from typing import Any, Protocol

import msgspec

from agentos.triggers.records import Backlog, DeliveryQuery, DeliveryRow, SecretRow, TriggerRow


class TriggerStorage(Protocol):
    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def create_trigger(self, trigger: TriggerRow, *, max_per_tenant: int) -> None:
        """Raises: Conflict (`too_many_triggers`)."""
        ...

    async def get_trigger(self, tenant_id: str, trigger_id: str) -> TriggerRow | None: ...

    async def find_trigger(self, trigger_id: str) -> TriggerRow | None:
        """By id alone (a delivery)."""
        ...

    async def list_triggers(self, tenant_id: str) -> list[TriggerRow]: ...

    async def set_secrets(self, tenant_id: str, trigger_id: str, secrets: Sequence[SecretRow]) -> bool:
        """Replace the trigger's secrets (a rotation); False if there is no such trigger."""
        ...

    async def delete_trigger(self, tenant_id: str, trigger_id: str) -> bool:
        """Delete it; its deliveries stay until they age out (their runs are ordinary runs)."""
        ...

    async def accept(self, delivery: DeliveryRow) -> tuple[DeliveryRow, bool]:
        """Commit `delivery` (queued) durably, unless (trigger_id, webhook_id) is already there:
        then the stored row and False (a redelivery: nothing is written)."""
        ...

    async def get_delivery(self, tenant_id: str, trigger_id: str, webhook_id: str) -> DeliveryRow | None: ...

    async def list_deliveries(self, tenant_id: str, trigger_id: str, query: DeliveryQuery) -> list[DeliveryRow]:
        """Newest first (`DeliveryQuery`)."""
        ...

    async def claim(self, owner: str, now_ms: int, lease_ms: int, limit: int) -> list[DeliveryRow]:
        """Up to `limit` queued deliveries due (`next_attempt_ms <= now_ms`) and not leased by
        another owner (or with an expired lease), oldest first; leased to `owner` until
        `now_ms + lease_ms`, `attempts + 1`."""
        ...

    async def mark_started(self, owner: str, trigger_id: str, webhook_id: str, now_ms: int) -> None: ...

    async def postpone(self, owner: str, trigger_id: str, webhook_id: str, next_attempt_ms: int) -> None:
        """Leave it queued (lease cleared) until `next_attempt_ms`: its run was refused for now."""
        ...

    async def mark_failed(self, owner: str, trigger_id: str, webhook_id: str, reason: str, now_ms: int) -> None: ...

    async def requeue_failed(self, tenant_id: str, trigger_id: str, webhook_id: str, now_ms: int) -> DeliveryRow | None:
        """Queue a `failed` delivery of the tenant again, due at `now_ms`: its reason cleared, its
        attempts from 0, its run id kept (no run was started under it); the row as it was then.
        None when there is no such delivery of the tenant, or it is not `failed`."""
        ...

    async def hurry(self, tenant_id: str | None, now_ms: int, limit: int) -> int:
        """Make up to `limit` postponed deliveries of the tenant (of any tenant: None) due at
        `now_ms`, oldest first: a run's place just freed. Leased ones are left alone; how many."""
        ...

    async def backlog(self) -> Backlog:
        """Deliveries still queued (every tenant's: the backlog gauge), when the first of them
        can be claimed (the dispatcher's idle wait ends by then), and the tenants whose
        deliveries were postponed, by any node (a place freed on this node hurries them)."""
        ...

    async def prune(self, before_ms: int) -> int:
        """Delete deliveries received before `before_ms` that are no longer queued (past the
        dedup horizon); how many."""
        ...


# -- What the two trigger storages share: the columns they read, and how a row becomes a record ----
#
# Both `SqliteTriggerStorage` and `PgTriggerStorage` select the columns in these orders, so one
# function turns a row of either into a `TriggerRow` or a `DeliveryRow` (sqlite3 rows are tuples,
# asyncpg's Records index by position too).


TRIGGER_COLUMNS = "trigger_id, tenant_id, agent, input_template, description, enabled, secrets, created_ms"
SELECT_TRIGGERS = f"SELECT {TRIGGER_COLUMNS} FROM triggers"
DELIVERY_COLUMNS = (
    "tenant_id, trigger_id, webhook_id, run_id, payload, received_ms, status, attempts, next_attempt_ms, reason"
)
# The records' attributes of those names, in the columns' order.
_TRIGGER_NAMES = TRIGGER_COLUMNS.split(", ")
_TRIGGER_VALUES = attrgetter(*_TRIGGER_NAMES)
_DELIVERY_VALUES = attrgetter(*DELIVERY_COLUMNS.split(", "))

# A secret as stored: [nonce, created_ms, expires_ms]; a list of them, newest first.
_Secrets = list[tuple[str, int, int | None]]


def encode_secrets(secrets: Sequence[SecretRow]) -> str:
    return msgspec.json.encode([[s.nonce, s.created_ms, s.expires_ms] for s in secrets]).decode()


def decode_secrets(raw: str | bytes) -> tuple[SecretRow, ...]:
    return tuple(
        SecretRow(nonce, created, expires) for nonce, created, expires in msgspec.json.decode(raw, type=_Secrets)
    )


def trigger_values(t: TriggerRow) -> tuple[Any, ...]:
    """The values of `TRIGGER_COLUMNS` for `t` (`enabled` as the driver's boolean: SQLite stores 0/1;
    `secrets`, the seventh, encoded)."""
    values = list(_TRIGGER_VALUES(t))
    values[6] = encode_secrets(t.secrets)
    return tuple(values)


def delivery_values(d: DeliveryRow) -> tuple[Any, ...]:
    """The values of `DELIVERY_COLUMNS` for `d`."""
    return tuple(_DELIVERY_VALUES(d))


def trigger_row(row: Sequence[Any]) -> TriggerRow:
    """A row of `TRIGGER_COLUMNS` as a record (`enabled` read back as a bool, `secrets` decoded)."""
    named = dict(zip(_TRIGGER_NAMES, row, strict=True))
    return TriggerRow(**named | {"enabled": bool(named["enabled"]), "secrets": decode_secrets(named["secrets"])})


def delivery_row(row: Sequence[Any]) -> DeliveryRow:
    """A row of `DELIVERY_COLUMNS` (the record's fields, in order) as a record."""
    values = list(row)
    values[4] = bytes(values[4])  # the payload, as bytes whatever buffer the driver returns
    return DeliveryRow(*values)
