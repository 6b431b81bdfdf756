"""What the two trigger storages share: the columns they read, and how a row becomes a record.

Both `SqliteTriggerStorage` and `PgTriggerStorage` select the columns in these orders, so one
function turns a row of either into a `TriggerRow` or a `DeliveryRow` (sqlite3 rows are tuples,
asyncpg's Records index by position too).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from agentos.triggers.records import DeliveryRow, SecretRow, TriggerRow

TRIGGER_COLUMNS = "trigger_id, tenant_id, agent, input_template, description, enabled, secrets, created_ms"
DELIVERY_COLUMNS = (
    "tenant_id, trigger_id, webhook_id, run_id, payload, received_ms, status, attempts, next_attempt_ms, reason"
)

# A secret as stored: [nonce, created_ms, expires_ms]; a list of them, newest first.
_Secrets = list[tuple[str, int, int | None]]


def encode_secrets(secrets: Sequence[SecretRow]) -> str:
    return msgspec.json.encode([[s.nonce, s.created_ms, s.expires_ms] for s in secrets]).decode()


def decode_secrets(raw: str | bytes) -> tuple[SecretRow, ...]:
    return tuple(
        SecretRow(nonce, created, expires) for nonce, created, expires in msgspec.json.decode(raw, type=_Secrets)
    )


def trigger_values(t: TriggerRow) -> tuple[Any, ...]:
    """The values of `TRIGGER_COLUMNS` for `t` (`enabled` as the driver's boolean: SQLite stores 0/1)."""
    return (
        t.trigger_id,
        t.tenant_id,
        t.agent,
        t.input_template,
        t.description,
        t.enabled,
        encode_secrets(t.secrets),
        t.created_ms,
    )


def delivery_values(d: DeliveryRow) -> tuple[Any, ...]:
    """The values of `DELIVERY_COLUMNS` for `d`."""
    return (
        d.tenant_id,
        d.trigger_id,
        d.webhook_id,
        d.run_id,
        d.payload,
        d.received_ms,
        d.status,
        d.attempts,
        d.next_attempt_ms,
        d.reason,
    )


def trigger_row(row: Sequence[Any]) -> TriggerRow:
    trigger_id, tenant_id, agent, template, description, enabled, secrets, created_ms = row
    return TriggerRow(
        trigger_id=trigger_id,
        tenant_id=tenant_id,
        agent=agent,
        input_template=template,
        description=description,
        secrets=decode_secrets(secrets),
        created_ms=created_ms,
        enabled=bool(enabled),
    )


def delivery_row(row: Sequence[Any]) -> DeliveryRow:
    tenant_id, trigger_id, webhook_id, run_id, payload, received_ms, status, attempts, next_attempt_ms, reason = row
    return DeliveryRow(
        tenant_id=tenant_id,
        trigger_id=trigger_id,
        webhook_id=webhook_id,
        run_id=run_id,
        payload=bytes(payload),
        received_ms=received_ms,
        status=status,
        attempts=attempts,
        next_attempt_ms=next_attempt_ms,
        reason=reason,
    )
