"""The kernel's limits: one frozen group, validated once at construction.

Theory of operation
-------------------
Every number the kernel decides with lives here, so a test builds a kernel with exactly the
limits it exercises and the runtime builds one from `Settings`. A limit of 0 on a gate turns that
gate off; the permit pool and the timeouts have no "off" (a pool of zero would deadlock).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, TypeVar

from agentos.kernel.tenants import TenantShare

R = TypeVar("R", bound=str)


@dataclass(frozen=True, slots=True, kw_only=True)
class KernelLimits:
    """Usage::

        Kernel(KernelLimits(max_in_flight_turns=1000, concurrency_limit=64, max_active_runs=256))

    Attributes:
        max_in_flight_turns: session turns admitted at once; 0 = no turn gate.
        concurrency_limit: provider streams open at once (turns and run model calls together).
        session_ttl_s: an idle session is evicted from memory after this long.
        permit_wait_timeout_s: a turn or stream waiting longer for a permit fails.
        retry_after_s: the Retry-After of every 429 (turns and runs).
        max_active_runs: runs with a task at once (running, stopping); 0 = no run gate.
            Children of a running run, resumed runs and answered runs are never refused.
        fair_reserve: on a server shared by several tenants, the fraction of
            `concurrency_limit` no one tenant may take (rounded up), so a newcomer is granted at
            once (`permits.py`); 0 = no reserve.
        tenant_defaults: the weight and caps of every tenant not configured otherwise
            (`TenantConfigured`).
        max_queued_turns_per_session: turns one session may hold waiting behind its active
            turn (`on_busy` "enqueue" and unclaimed "steer"); over it: 429 `turn_queue_full`.
    """

    max_in_flight_turns: int = 0
    concurrency_limit: int = 64
    session_ttl_s: float = 300.0
    permit_wait_timeout_s: float = 30.0
    retry_after_s: int = 1
    max_active_runs: int = 0
    fair_reserve: float = 0.1
    tenant_defaults: TenantShare = field(default_factory=TenantShare)
    max_queued_turns_per_session: int = 8

    def __post_init__(self) -> None:
        assert self.max_in_flight_turns >= 0 and self.max_active_runs >= 0
        assert self.max_queued_turns_per_session >= 0
        assert 0 <= self.fair_reserve < 1
        assert self.concurrency_limit >= 1
        assert self.session_ttl_s > 0 and self.permit_wait_timeout_s > 0


def refusal(active: int, limit: int, held: int, cap: int, capped: R) -> Literal["overloaded"] | R | None:
    """Why one more is refused: "overloaded" when `active` reached the server's `limit`, else
    `capped` when the tenant's `held` reached its `cap` (a limit or cap of 0 is none); None: it fits."""
    if limit and active >= limit:
        return "overloaded"
    return capped if cap and held >= cap else None
