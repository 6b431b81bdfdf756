"""Tenants as the kernel sees them: each one's share of the provider, its caps, what it uses.

Theory of operation
-------------------
A tenant is a name on the events that take a permit or a slot (`TurnSubmitted`,
`StreamRequested`, `RunSubmitted`). The kernel keeps no list of tenants: one it has not been
told about (`TenantConfigured`) gets `KernelLimits.tenant_defaults` (weight 1, no caps unless the
operator set every tenant's defaults), so a server without tenants pays nothing.

- `TenantShare`: the weight (the tenant's share of the permits against the others', see
  `permits.py`) and the caps on its admitted turns and active runs (0 = none). A share equal to
  the defaults is not stored: the table holds only the tenants that differ.
- `Tally`: a count per tenant (admitted turns, active runs) that drops a tenant at zero, so its
  size is bounded by the tenants that hold something now.
- `multi`: whether the server is shared. It turns on when a second tenant is configured or
  seen, and stays on: the fair-share reserve of `permits.py` applies only then, so a
  single-tenant server keeps its whole pool.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_TENANT = "default"
"""The tenant of events that name none (the same name as `agentos.store.records.DEFAULT_TENANT`)."""


@dataclass(frozen=True, slots=True)
class TenantShare:
    """Attributes:
    weight: the tenant's share of the provider permits against other tenants' (>= 1).
    max_concurrent_turns: its session turns admitted at once; 0 = no cap.
    max_active_runs: its runs with a task at once (plain submissions only); 0 = no cap.
    """

    weight: int = 1
    max_concurrent_turns: int = 0
    max_active_runs: int = 0

    def __post_init__(self) -> None:
        assert self.weight >= 1 and self.max_concurrent_turns >= 0 and self.max_active_runs >= 0


class Tally:
    """A count per tenant; a tenant at zero is not stored."""

    __slots__ = ("_counts",)

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}

    def __getitem__(self, tenant: str) -> int:
        return self._counts.get(tenant, 0)

    def __len__(self) -> int:
        return len(self._counts)

    def add(self, tenant: str, delta: int) -> None:
        count = self._counts.get(tenant, 0) + delta
        assert count >= 0, f"tenant {tenant!r} count below zero"
        if count:
            self._counts[tenant] = count
        else:
            self._counts.pop(tenant, None)


class Tenants:
    __slots__ = ("_defaults", "_first", "_shares", "multi", "runs", "turns", "version")

    def __init__(self, defaults: TenantShare) -> None:
        self._defaults = defaults
        self._shares: dict[str, TenantShare] = {}
        self._first: str | None = None
        self.multi = False
        self.turns = Tally()  # admitted session turns per tenant
        self.runs = Tally()  # active runs (with a task) per tenant
        self.version = 0  # counts `configure` calls: a weight may have changed

    def share(self, tenant: str) -> TenantShare:
        return self._shares.get(tenant, self._defaults)

    def configure(self, tenant: str, share: TenantShare) -> None:
        self.note(tenant)
        self.version += 1
        if share == self._defaults:
            self._shares.pop(tenant, None)
        else:
            self._shares[tenant] = share

    def note(self, tenant: str) -> None:
        """A tenant asks for something: a second one makes the server shared."""
        if self.multi or tenant == self._first:
            return
        if self._first is None:
            self._first = tenant
        else:
            self.multi = True
