"""What a change makes of a row: a tenant with new overrides, a new key and its record.

Pure: the registry (`agentos.tenancy.registry`) calls these under its lock, then commits the
row they return and applies it in memory.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from agentos.config.tenants import TenantLimits
from agentos.tenancy import keys
from agentos.tenancy.principal import Scope
from agentos.tenancy.records import ApiKey, Tenant, effective_limits, whole_numbers


def updated_tenant(
    tenant: Tenant,
    defaults: TenantLimits,
    *,
    name: str | None,
    limits: dict[str, int | float | None] | None,
    disabled: bool | None,
) -> Tenant:
    """`tenant` with what is given changed; `limits` is merged into the overrides (None drops one).

    Raises: InvalidInput (a limit out of range).
    """
    overrides = dict(tenant.limits)
    for limit, value in (limits or {}).items():
        if value is None:
            overrides.pop(limit, None)
        else:
            overrides[limit] = value
    effective_limits(defaults, overrides)
    return msgspec.structs.replace(
        tenant,
        limits=whole_numbers(overrides),
        name=tenant.name if name is None else name,
        disabled=tenant.disabled if disabled is None else disabled,
    )


def new_key(
    pepper: bytes,
    key_id: str,
    tenant_id: str,
    *,
    name: str,
    scopes: Iterable[Scope],
    now_ms: int,
    expires_in_s: int | None,
    budgets: tuple[float, float] = (0.0, 0.0),
) -> tuple[str, ApiKey]:
    """A new key (shown once, never stored) and its record, which holds only the secret's hash."""
    key = keys.generate(key_id)
    record = ApiKey(
        key_id=key_id,
        tenant_id=tenant_id,
        name=name,
        scopes=tuple(sorted({Scope(s).value for s in scopes})),
        created_ms=now_ms,
        expires_ms=None if expires_in_s is None else now_ms + expires_in_s * 1000,
        hash=keys.hash_secret(pepper, keys.parse(key).secret),
        budget_per_day=budgets[0],
        budget_per_month=budgets[1],
    )
    return key, record
