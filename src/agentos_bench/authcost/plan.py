"""What an auth-cost run does: its sizes and the two server configurations (A: open, B: keys)."""

from __future__ import annotations

from dataclasses import dataclass

MODES = ("open", "keys")  # A, B
# High enough that no request is ever refused, so the limiter runs (and allows) on every request.
NEVER_REFUSING_RATE = 1_000_000_000
ADMIN_TOKEN = "auth-cost-bench-admin-token"  # only ever on 127.0.0.1, for a throwaway server


@dataclass(frozen=True, kw_only=True)
class AuthCostPlan:
    """Attributes:
    rounds: rounds per configuration (A and B alternate, A first).
    requests: measured requests per round.
    concurrency: client connections (keep-alive), one request in flight on each.
    tenants, keys_per_tenant: configuration B's keys (one session per key).
    warmup_requests: per round, before the measurement (not counted).
    round_timeout_s: the most one round's measured requests may take.
    micro_calls: calls per microbench figure (0: skip the microbench).
    settle_s: after the last response, before the CPU sample (the access-log writer's last batch).
    command: the command line, for the report.
    """

    rounds: int = 5
    requests: int = 20_000
    concurrency: int = 32
    tenants: int = 100
    keys_per_tenant: int = 10
    warmup_requests: int = 1_000
    round_timeout_s: float = 120.0
    micro_calls: int = 20_000
    settle_s: float = 0.2
    command: str = ""

    @property
    def targets(self) -> int:
        """Sessions read (one per key in B; as many in A, so both stores hold the same rows)."""
        return self.tenants * self.keys_per_tenant


def config_toml(mode: str) -> str:
    """The server's config file for `mode` (the token comes from the environment, in B only)."""
    text = (
        "# auth-cost bench: the store on (the route reads SQLite), the admission gate off\n"
        'log_level = "warning"\n\n[kernel]\nmax_in_flight_turns = 0\n\n[store]\nenabled = true\n'
    )
    if mode == "keys":
        text += (
            f"\n[tenant_limits]\nrequests_per_minute = {NEVER_REFUSING_RATE}\n"
            f"key_requests_per_minute = {NEVER_REFUSING_RATE}\n"
        )
    return text
