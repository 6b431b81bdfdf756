"""A key's precomputed answer: what `TenantRegistry.authenticate` looks up on every request.

Built once per change of the key or its tenant (never per request), so a request costs a
parse, one dict lookup and one HMAC.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from agentos.config.tenants import TenantLimits
from agentos.errors import InvalidInput
from agentos.tenancy.principal import Principal, Scope
from agentos.tenancy.records import ApiKey, Tenant, effective_limits

_KNOWN_SCOPES = frozenset(s.value for s in Scope)


@dataclass(frozen=True, slots=True)
class Refused:
    """Why a bearer key was refused; `key_id` is that of a well-formed key ("" otherwise)."""

    key_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class Entry:
    hash: bytes
    expires_ms: int | None
    refusal: str  # "" = usable; else why not (revoked, tenant disabled), checked after the HMAC
    principal: Principal


def update_entries(
    entries: dict[str, Entry], changed: Iterable[ApiKey], tenants: Mapping[str, Tenant], defaults: TenantLimits
) -> None:
    """Rebuild the entries of the `changed` keys. A tenant's limits are computed once, not per
    key: a full reload may rebuild thousands of keys of a few tenants."""
    limits: dict[str, TenantLimits] = {}
    for record in changed:
        tenant = tenants.get(record.tenant_id)
        if record.tenant_id not in limits:
            limits[record.tenant_id] = _limits(tenant, defaults)
        entries[record.key_id] = entry_of(record, tenant, limits[record.tenant_id])


def entry_of(record: ApiKey, tenant: Tenant | None, limits: TenantLimits) -> Entry:
    """The answer for `record`, whose tenant is `tenant` (None: unknown, so refused)."""
    refusal = "the key was revoked" if record.revoked_ms is not None else ""
    if tenant is None or tenant.disabled:
        refusal = refusal or "the key's tenant is disabled"
    scopes = frozenset(Scope(s) for s in record.scopes if s in _KNOWN_SCOPES)  # a newer version's: ignored
    return Entry(record.hash, record.expires_ms, refusal, Principal(record.tenant_id, record.key_id, scopes, limits))


def _limits(tenant: Tenant | None, defaults: TenantLimits) -> TenantLimits:
    try:
        return effective_limits(defaults, tenant.limits) if tenant else defaults
    except InvalidInput:  # a row written by a newer version, with a limit this one lacks
        return defaults
