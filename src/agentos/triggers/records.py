"""The rows of triggers and their deliveries."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

DeliveryStatus = Literal["queued", "started", "failed"]
DELIVERY_STATUSES: tuple[DeliveryStatus, ...] = get_args(DeliveryStatus)


@dataclass(frozen=True, slots=True)
class SecretRow:
    """One signing secret of a trigger. The secret itself is never stored: it is derived from
    the server's key pepper and this `nonce` (`signatures.derive_secret`), so the database alone
    does not let anyone sign. `expires_ms` None: current; else valid until then (rotated out)."""

    nonce: str  # hex, random 32 bytes
    created_ms: int
    expires_ms: int | None = None


# What the API answers of each row, in this order (the secrets themselves and the payload stay inside).
_TRIGGER_ANSWER = ["trigger_id", "agent", "input_template", "description", "enabled", "created_ms"]
_DELIVERY_ANSWER = ["webhook_id", "run_id", "status", "received_ms", "attempts", "reason"]


@dataclass(frozen=True, slots=True)
class TriggerRow:
    trigger_id: str  # random, global ("trg_" + 20 hex)
    tenant_id: str
    agent: str  # the agent whose run each delivery starts
    input_template: str  # the run's input; `{payload}` (the body as JSON text) and `{payload.a.b}` are filled in
    description: str
    secrets: tuple[SecretRow, ...]  # newest first
    created_ms: int
    enabled: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _TRIGGER_ANSWER} | {
            "events_url": f"/v1/triggers/{self.trigger_id}/events",
            "secrets": [{"created_ms": s.created_ms, "expires_ms": s.expires_ms} for s in self.secrets],
        }


@dataclass(frozen=True, slots=True)
class DeliveryRow:
    """One accepted delivery. `run_id` is chosen when it is accepted (and answered), so the run
    the dispatcher starts later has that id, and a redelivery answers the same one."""

    tenant_id: str
    trigger_id: str
    webhook_id: str  # the sender's id of the event, unique per trigger
    run_id: str
    payload: bytes  # the body exactly as received
    received_ms: int
    status: DeliveryStatus = "queued"
    attempts: int = 0
    next_attempt_ms: int = 0  # the dispatcher leaves it until then (a refused start waits)
    reason: str | None = None  # why it failed (the agent is gone, the input is refused)

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _DELIVERY_ANSWER}


@dataclass(frozen=True, slots=True)
class DeliveryQuery:
    """A page of one trigger's deliveries, newest first: up to `limit`, received before
    `before_ms` (the page before's cursor; None: from the newest), in `status` (None: any)."""

    limit: int = 100
    before_ms: int | None = None
    status: DeliveryStatus | None = None


@dataclass(frozen=True, slots=True)
class Backlog:
    """The deliveries still queued (every tenant's), and the earliest time one of them can be
    claimed: its `next_attempt_ms`, or just after its lease ends (None: nothing is queued).
    `postponed_tenants`: the tenants of the deliveries tried and put back to wait (at most
    `MAX_POSTPONED_TENANTS` of them), whichever node tried them."""

    queued: int
    next_due_ms: int | None
    postponed_tenants: tuple[str, ...] = ()


MAX_POSTPONED_TENANTS = 1000
