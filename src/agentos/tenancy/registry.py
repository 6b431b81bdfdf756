"""The tenant registry: every tenant and key in memory, persisted in a `RegistryStorage`.

Theory of operation:
- The storage (`agentos.tenancy.storage`) is `tenants.db` (SQLite) or, with
  `store.backend = "postgres"`, the tables every node shares (`pg_tables`).
- `open()` reads every row once; after that a request's key check (`authenticate`) is a
  parse, one dict lookup and one HMAC, and never touches the database.
- Each key's answer is precomputed as an `Entry` (`entries`) (its hash, expiry, revocation and the
  `Principal` it yields, with its tenant's effective limits). A change (a key created or
  revoked, a tenant updated or disabled) is committed to the storage first, then replaces the
  entries it affects: the next request sees it. Changes are serialized by one lock, so two
  admins racing on one id cannot interleave between the check and the commit.
- Changes made by other nodes arrive through `refresh` (the storage's `follow`), which reads
  and applies under that same lock: a read older than a local write never overwrites it.
- Tenant "default" always exists (created on the first open).
- Time comes from `now_ms` (injected: tests use a FakeClock and never sleep).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import msgspec

from agentos.clock import wall_ms
from agentos.config.identity import IssuerConfig
from agentos.config.tenants import Overrides, TenantLimits
from agentos.errors import InvalidInput
from agentos.store.records import DEFAULT_TENANT
from agentos.tenancy import keys
from agentos.tenancy.changes import new_key, updated_tenant
from agentos.tenancy.entries import Entry, Refused, update_entries
from agentos.tenancy.principal import Principal, Scope
from agentos.tenancy.records import (
    ApiKey,
    KeyNotFound,
    Tenant,
    TenantExists,
    TenantNotFound,
    check_budgets,
    check_tenant_id,
    effective_limits,
    whole_numbers,
)
from agentos.tenancy.storage import RegistryStorage, Rows
from agentos.tenancy.tables import TenantTables

__all__ = ["MAX_EXPIRES_IN_S", "Refused", "RegistryStatistics", "TenantRegistry"]

MAX_EXPIRES_IN_S = 10 * 365 * 24 * 3600


@dataclass(frozen=True, slots=True)
class RegistryStatistics:
    tenants: int
    keys: int
    usable_keys: int


class TenantRegistry:
    """Usage::

    registry = TenantRegistry(Path("data/tenants.db"), pepper, defaults=settings.tenant_limits)
    # or TenantRegistry(PgTenantTables(settings.store, pepper), pepper, ...): shared by the nodes
    await registry.open()
    key, record = await registry.create_key("default", name="ci", scopes=[Scope.SESSIONS_READ])
    registry.authenticate(key)        # -> Principal, or Refused
    await registry.close()
    """

    def __init__(
        self,
        storage: RegistryStorage | Path | None,
        pepper: bytes,
        *,
        defaults: TenantLimits | None = None,
        now_ms: Callable[[], int] = wall_ms,
    ) -> None:
        self._storage = TenantTables(storage) if storage is None or isinstance(storage, Path) else storage
        self._pepper = pepper
        self.defaults = defaults or TenantLimits()
        self.now_ms = now_ms
        self._tenants: dict[str, Tenant] = {}
        self._keys: dict[str, ApiKey] = {}
        self._entries: dict[str, Entry] = {}
        self._usable_until_ms: float = 0  # inf: an unrevoked key that never expires
        self._lock = asyncio.Lock()
        self._watchers: list[Callable[[str, TenantLimits], None]] = []
        self._budgets: dict[str, tuple[float, float]] = {}  # tenant_budgets, until the tenant changes

    @property
    def pepper(self) -> bytes:
        """The server's secret key material (keys are hashed with it; trigger secrets derive from it)."""
        return self._pepper

    async def open(self) -> None:
        """Read every row into memory; create tenant "default" the first time; follow changes.

        Raises:
            StoreError: the storage cannot be opened or read.
            ConfigError: (PostgreSQL) as `RegistryStorage.open`.
        """
        await self._storage.open()
        tenants, stored = await self._storage.load()
        if all(t.tenant_id != DEFAULT_TENANT for t in tenants):
            default = Tenant(tenant_id=DEFAULT_TENANT, name="default", created_ms=self.now_ms())
            if await self._storage.put_tenant(default, create=True):
                tenants.append(default)
            else:  # another node starting at the same time made it first
                tenants, stored = await self._storage.load()
        self._replace(tenants, stored)
        await self._storage.follow(self)

    async def close(self) -> None:
        await self._storage.close()

    async def refresh(self, read: Callable[[], Awaitable[Rows]], *, full: bool) -> None:
        """Take rows changed by another node (`ChangeSink`); if `read` raises, nothing changes."""
        async with self._lock:
            tenants, stored = await read()
            (self._replace if full else self._apply)(tenants, stored)

    # -- the request path: memory only ---------------------------------------------------------

    def authenticate(self, key: str) -> Principal | Refused:
        """The principal of a bearer key, or why it is refused. No I/O."""
        try:
            parsed = keys.parse(key)
        except keys.MalformedKey as exc:
            return Refused("", str(exc))
        entry = self._entries.get(parsed.key_id)
        if entry is None or not keys.verify(self._pepper, parsed.secret, entry.hash):
            return Refused(parsed.key_id, "unknown key")
        if entry.refusal:
            return Refused(parsed.key_id, entry.refusal)
        if entry.expires_ms is not None and self.now_ms() >= entry.expires_ms:
            return Refused(parsed.key_id, "the key has expired")
        return entry.principal

    def has_usable_keys(self) -> bool:
        """Whether any key is neither revoked nor expired (with none, a loopback server is open).
        O(1): the latest expiry of the unrevoked keys is kept up to date by every change."""
        return self.now_ms() < self._usable_until_ms

    def statistics(self) -> RegistryStatistics:
        now = self.now_ms()
        usable = sum(k.status(now) == "active" for k in self._keys.values())
        return RegistryStatistics(len(self._tenants), len(self._keys), usable)

    # -- tenants -------------------------------------------------------------------------------

    def tenant(self, tenant_id: str) -> Tenant:
        """Raises: TenantNotFound."""
        try:
            return self._tenants[tenant_id]
        except KeyError:
            raise TenantNotFound(tenant_id) from None

    def tenant_or_none(self, tenant_id: str) -> Tenant | None:
        """The tenant's row as held now (a change replaces the object), or None. No I/O."""
        return self._tenants.get(tenant_id)

    def is_enabled(self, tenant_id: str) -> bool:
        """False for a disabled tenant, and for one that does not exist."""
        tenant = self._tenants.get(tenant_id)
        return tenant is not None and not tenant.disabled

    def tenants(self, *, after: str | None, limit: int) -> list[Tenant]:
        return [self._tenants[t] for t in sorted(self._tenants) if after is None or t > after][:limit]

    def watch_limits(self, notify: Callable[[str, TenantLimits], None]) -> None:
        """Call `notify(tenant_id, effective limits)` for every tenant now and after every change
        of one (the kernel's weights and caps follow the registry this way)."""
        self._watchers.append(notify)
        for tenant_id in self._tenants:
            notify(tenant_id, self.limits_of(tenant_id))

    def limits_of(self, tenant_id: str) -> TenantLimits:
        """The tenant's effective limits (its overrides over the defaults). Raises: TenantNotFound."""
        return effective_limits(self.defaults, self.tenant(tenant_id).limits)

    def tenant_budgets(self, tenant_id: str) -> tuple[float, float]:
        """The tenant's (per day, per month) spending budgets; 0 each: none (`BudgetLimits`)."""
        known = self._budgets.get(tenant_id)
        if known is None:  # asked before every model call: the overrides are merged once per change
            tenant = self._tenants.get(tenant_id)
            limits = self.defaults if tenant is None else effective_limits(self.defaults, tenant.limits)
            known = self._budgets[tenant_id] = (limits.budget_per_day, limits.budget_per_month)
        return known

    def key_budgets(self, key_id: str) -> tuple[float, float]:
        """The key's (per day, per month) spending budgets; 0 each: none (`BudgetLimits`)."""
        key = self._keys.get(key_id)
        return (0.0, 0.0) if key is None else (key.budget_per_day, key.budget_per_month)

    async def create_tenant(self, tenant_id: str, *, name: str = "", limits: Overrides | None = None) -> Tenant:
        """Raises: InvalidInput (a bad id or limit), TenantExists, StoreError."""
        check_tenant_id(tenant_id)
        effective_limits(self.defaults, limits or {})
        async with self._lock:
            if tenant_id in self._tenants:
                raise TenantExists(tenant_id)
            overrides = whole_numbers(limits or {})
            tenant = Tenant(tenant_id=tenant_id, name=name, limits=overrides, created_ms=self.now_ms())
            # `create`: another node may have made it without this one having heard yet
            if not await self._storage.put_tenant(tenant, create=True):
                raise TenantExists(tenant_id)
            self._apply([tenant], [])
        return tenant

    async def update_tenant(
        self,
        tenant_id: str,
        *,
        name: str | None = None,
        limits: dict[str, int | float | None] | None = None,
        disabled: bool | None = None,
    ) -> Tenant:
        """Change what is given; `limits` is merged into the overrides (a None value drops one).

        Raises: TenantNotFound, InvalidInput, StoreError.
        """
        async with self._lock:
            tenant = updated_tenant(self.tenant(tenant_id), self.defaults, name=name, limits=limits, disabled=disabled)
            await self._storage.put_tenant(tenant)
            self._apply([tenant], [])
        return tenant

    async def set_issuers(self, tenant_id: str, issuers: tuple[IssuerConfig, ...]) -> Tenant:
        """The tenant's identity providers are now `issuers` (checked by the caller,
        `agentos.identity.issuers`); every node applies them as any change of the tenant.

        Raises: TenantNotFound, StoreError.
        """
        async with self._lock:
            tenant = msgspec.structs.replace(self.tenant(tenant_id), issuers=issuers)
            await self._storage.put_tenant(tenant)
            self._apply([tenant], [])
        return tenant

    # -- keys ----------------------------------------------------------------------------------

    def key(self, key_id: str) -> ApiKey:
        """Raises: KeyNotFound."""
        try:
            return self._keys[key_id]
        except KeyError:
            raise KeyNotFound(key_id) from None

    def keys(self, *, tenant_id: str | None = None, after: str | None = None, limit: int = 100) -> list[ApiKey]:
        chosen = (k for k in sorted(self._keys) if after is None or k > after)
        return [self._keys[k] for k in chosen if tenant_id is None or self._keys[k].tenant_id == tenant_id][:limit]

    async def create_key(
        self,
        tenant_id: str,
        *,
        name: str = "",
        scopes: Iterable[Scope] = (),
        expires_in_s: int | None = None,
        budgets: tuple[float, float] = (0.0, 0.0),
    ) -> tuple[str, ApiKey]:
        """A new key of `tenant_id`: the key itself (shown once, never stored) and its record.
        `budgets`: its own spending budgets (per day, per month; 0: none).

        Raises: TenantNotFound, InvalidInput (expiry or a budget out of range), StoreError.
        """
        check_budgets(*budgets)
        if expires_in_s is not None and not 1 <= expires_in_s <= MAX_EXPIRES_IN_S:
            raise InvalidInput(f"expires_in_s must be from 1 to {MAX_EXPIRES_IN_S}, got {expires_in_s}")
        async with self._lock:
            self.tenant(tenant_id)
            key_id = keys.new_key_id()
            while key_id in self._keys:  # pragma: no cover - 71 random bits
                key_id = keys.new_key_id()
            key, record = new_key(
                self._pepper,
                key_id,
                tenant_id,
                name=name,
                scopes=scopes,
                now_ms=self.now_ms(),
                expires_in_s=expires_in_s,
                budgets=budgets,
            )
            await self._put_key(record)
        return key, record

    async def update_key(
        self, key_id: str, *, budget_per_day: float | None = None, budget_per_month: float | None = None
    ) -> ApiKey:
        """Change the key's spending budgets (None: unchanged; 0: none).

        Raises: KeyNotFound, InvalidInput (a budget out of range), StoreError.
        """
        async with self._lock:
            record = self.key(key_id)
            per_day = record.budget_per_day if budget_per_day is None else budget_per_day
            per_month = record.budget_per_month if budget_per_month is None else budget_per_month
            check_budgets(per_day, per_month)
            record = msgspec.structs.replace(record, budget_per_day=per_day, budget_per_month=per_month)
            await self._put_key(record)
        return record

    async def revoke_key(self, key_id: str) -> ApiKey:
        """Revoke the key from the next request on; revoking a revoked key changes nothing.

        Raises: KeyNotFound, StoreError.
        """
        async with self._lock:
            record = self.key(key_id)
            if record.revoked_ms is None:
                record = msgspec.structs.replace(record, revoked_ms=self.now_ms())
                await self._put_key(record)
        return record

    async def _put_key(self, record: ApiKey) -> None:
        await self._storage.put_key(record)
        self._apply([], [record])

    # -- memory: every change lands here -------------------------------------------------------

    def _apply(self, tenants: list[Tenant], stored: list[ApiKey]) -> None:
        """These rows are now as given: a local write, or another node's (then maybe unchanged)."""
        changed = {t.tenant_id for t in tenants if self._tenants.get(t.tenant_id) != t}
        self._tenants.update((t.tenant_id, t) for t in tenants)
        self._keys.update((k.key_id, k) for k in stored)
        affected = [k for k in self._keys.values() if k.tenant_id in changed] if changed else []
        self._rebuild([*stored, *affected])
        self._notify(changed)

    def _replace(self, tenants: list[Tenant], stored: list[ApiKey]) -> None:
        """All the rows there are (first load, full reload); only what differs is rebuilt."""
        before, before_keys = self._tenants, self._keys
        self._tenants, self._keys = {t.tenant_id: t for t in tenants}, {k.key_id: k for k in stored}
        changed = {t for t, tenant in self._tenants.items() if before.get(t) != tenant}
        for gone in before_keys.keys() - self._keys.keys():
            del self._entries[gone]
        self._rebuild(k for k in stored if k.tenant_id in changed or before_keys.get(k.key_id) != k)
        self._notify(changed)

    def _notify(self, tenant_ids: Iterable[str]) -> None:
        for tenant_id in tenant_ids:
            self._budgets.pop(tenant_id, None)
            for notify in self._watchers:
                notify(tenant_id, self.limits_of(tenant_id))

    def _rebuild(self, changed: Iterable[ApiKey]) -> None:
        """The entries of `changed`, and the latest usable expiry of all keys."""
        update_entries(self._entries, changed, self._tenants, self.defaults)
        unrevoked = [k.expires_ms or math.inf for k in self._keys.values() if k.revoked_ms is None]
        self._usable_until_ms = max(unrevoked, default=0)
