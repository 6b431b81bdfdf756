"""What the tenant registry keeps: tenants and their API keys, and how each is shown over the API.

A key row holds its keyed hash, never the key (`agentos.tenancy.keys`); the key itself exists
only in the answer to its creation.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Literal

import msgspec

from agentos.config.identity import IssuerConfig
from agentos.config.tenants import MAX_BUDGET, MAXIMA, WHOLE_LIMITS, Overrides, TenantLimits
from agentos.errors import Conflict, InvalidInput, NotFound

log = logging.getLogger("agentos.tenancy")
TENANT_ID_PATTERN = "^[a-z0-9][a-z0-9_-]{0,62}$"
_TENANT_ID = re.compile(TENANT_ID_PATTERN)
KeyStatus = Literal["active", "expired", "revoked"]


class Tenant(msgspec.Struct, frozen=True, kw_only=True):
    """`limits`: the tenant's own overrides of `Settings.tenant_limits` (a partial table).
    `issuers`: its identity providers set over the admin API (beside the config file's)."""

    tenant_id: str
    name: str = ""
    limits: Overrides = {}
    disabled: bool = False
    created_ms: int = 0
    issuers: tuple[IssuerConfig, ...] = ()


class ApiKey(msgspec.Struct, frozen=True, kw_only=True):
    key_id: str
    tenant_id: str
    name: str
    scopes: tuple[str, ...]
    created_ms: int
    expires_ms: int | None = None
    revoked_ms: int | None = None
    hash: bytes = b""
    # What the key's model calls may cost per UTC day and calendar month, in the operator's
    # currency; 0: no budget of its own (the tenant's still apply).
    budget_per_day: float = 0.0
    budget_per_month: float = 0.0

    def __repr__(self) -> str:  # the hash stays out of logs and tracebacks too
        return f"ApiKey(key_id={self.key_id!r}, tenant_id={self.tenant_id!r}, scopes={self.scopes!r})"

    def status(self, now_ms: int) -> KeyStatus:
        if self.revoked_ms is not None:
            return "revoked"
        if self.expires_ms is not None and now_ms >= self.expires_ms:
            return "expired"
        return "active"


class TenantNotFound(NotFound):
    code = "tenant_not_found"

    def __init__(self, tenant_id: str) -> None:
        super().__init__(f"tenant {tenant_id!r} not found")


class KeyNotFound(NotFound):
    code = "key_not_found"

    def __init__(self, key_id: str) -> None:
        super().__init__(f"key {key_id!r} not found")


class TenantExists(Conflict):
    code = "tenant_exists"

    def __init__(self, tenant_id: str) -> None:
        super().__init__(f"tenant {tenant_id!r} already exists")


def encode_issuers(issuers: tuple[IssuerConfig, ...]) -> str:
    """The stored form of a tenant's issuers (a JSON list, both storages)."""
    return msgspec.json.encode(issuers).decode()


def decode_issuers(tenant_id: str, raw: str | bytes) -> tuple[IssuerConfig, ...]:
    """A tenant's stored issuers, each bound to the row's tenant whatever the JSON says. A row
    this version cannot read (a newer version's fields) trusts no issuer, and says so."""
    try:
        found = msgspec.json.decode(raw, type=tuple[IssuerConfig, ...])
    except msgspec.ValidationError as exc:
        log.warning("tenant %r: its identity providers cannot be read (%s); none is trusted", tenant_id, exc)
        return ()
    return tuple(msgspec.structs.replace(issuer, tenant=tenant_id) for issuer in found)


def check_tenant_id(tenant_id: str) -> str:
    """Raises: InvalidInput: not a slug of `TENANT_ID_PATTERN`."""
    if not _TENANT_ID.fullmatch(tenant_id):  # not `match`: its `$` lets a trailing newline through
        raise InvalidInput(f"tenant_id must match {TENANT_ID_PATTERN}, got {tenant_id!r}")
    return tenant_id


def check_budgets(*amounts: float) -> None:
    """Raises: InvalidInput: a budget that is not a finite number from 0 to `MAX_BUDGET`."""
    for amount in amounts:
        if not 0 <= amount <= MAX_BUDGET:  # nan compares false: refused too
            raise InvalidInput(f"a budget must be a number from 0 to {MAX_BUDGET}, got {str(amount)[:40]}")


def whole_numbers(overrides: Overrides) -> Overrides:
    """`overrides` with a whole float (`3059.0`, an integer as JSON Schema counts it) of an
    integer limit as the integer: the limits take any JSON number since budgets are currency."""
    return {
        k: int(v) if k in WHOLE_LIMITS and isinstance(v, float) and v.is_integer() else v for k, v in overrides.items()
    }


def effective_limits(defaults: TenantLimits, overrides: Overrides) -> TenantLimits:
    """The defaults with a tenant's overrides on top.

    Raises:
        InvalidInput: an unknown limit, or a value out of its range (the message names it).
    """
    unknown = sorted(set(overrides) - set(TenantLimits.__struct_fields__))
    if unknown:
        raise InvalidInput(f"unknown limit {unknown[0]!r}; known: {', '.join(TenantLimits.__struct_fields__)}")
    for name, value in overrides.items():
        # the usual refusal, said plainly (a bool is refused by msgspec below, as not a number)
        if isinstance(value, int | float) and not isinstance(value, bool) and value > MAXIMA[name]:
            raise InvalidInput(f"limits.{name}: at most {MAXIMA[name]}, got {str(value)[:40]}")
    try:
        return msgspec.convert(msgspec.to_builtins(defaults) | whole_numbers(overrides), TenantLimits)
    except msgspec.ValidationError as exc:
        message, _, at = str(exc).rpartition(" - at `$.")
        raise InvalidInput(f"limits.{at.rstrip('`')}: {message}" if at else f"limits: {exc}") from None


def tenant_json(tenant: Tenant, defaults: TenantLimits) -> dict[str, Any]:
    return {
        "tenant_id": tenant.tenant_id,
        "name": tenant.name,
        "disabled": tenant.disabled,
        "limit_overrides": tenant.limits,
        "limits": msgspec.to_builtins(effective_limits(defaults, tenant.limits)),
        "created_ms": tenant.created_ms,
    }


def key_json(key: ApiKey, now_ms: int) -> dict[str, Any]:
    return {
        "key_id": key.key_id,
        "tenant_id": key.tenant_id,
        "name": key.name,
        "scopes": list(key.scopes),
        "status": key.status(now_ms),
        "created_ms": key.created_ms,
        "expires_ms": key.expires_ms,
        "revoked_ms": key.revoked_ms,
        "budget_per_day": key.budget_per_day,
        "budget_per_month": key.budget_per_month,
    }
