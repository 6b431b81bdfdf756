"""What the fallback campaign runs: its sizes and times, and the server's config.

The server serves one model, `m`, from two targets in order: `primary/mock-1` (a mock process
that the campaign switches to answer every request 500 for `fault_for_s`) and
`secondary/mock-1` (another mock process, always healthy). `max_retries = 0` on the primary:
with a target behind it the router moves on at once anyway; the setting says so in the config.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from agentos.mock.server import MockSettings

MODEL = "m"
PRIMARY = "primary/mock-1"  # the targets' names, as on /metrics
SECONDARY = "secondary/mock-1"


@dataclass(frozen=True, kw_only=True)
class FallbackPlan:
    users: int = 1000
    seconds: float = 90.0  # the measured window; the fault sits inside it
    fault_at_s: float = 30.0  # from the window's start
    fault_for_s: float = 30.0
    warmup_s: float = 3.0
    turn_timeout_s: float = 60.0
    mock: MockSettings = field(default_factory=lambda: MockSettings(ttft_ms=2000.0, tps=200.0, tokens=8))
    breaker_failures: int = 5
    breaker_cooldown_s: float = 5.0
    breaker_probes: int = 1
    poll_s: float = 0.05  # how often the server's /metrics is read for the breaker's state
    profile: str = "full-store"  # the server's profile (packaged name or a path): kernel limits and store
    control: bool = True  # the same campaign without the fault first, in the same sitting
    notes: tuple[str, ...] = ()

    @property
    def fault_off_s(self) -> float:
        return self.fault_at_s + self.fault_for_s

    def problems(self) -> list[str]:
        """What is wrong with the plan, in words (empty: it can run)."""
        found = []
        if self.users < 1:
            found.append("--users must be >= 1")
        if not 0 < self.fault_at_s < self.fault_off_s < self.seconds:
            found.append("the fault must start after the window opens and end before it closes")
        if self.poll_s <= 0 or self.breaker_failures < 1 or self.breaker_probes < 1 or self.breaker_cooldown_s <= 0:
            found.append("--poll-ms, --breaker-failures, --breaker-probes and --breaker-cooldown-s must be > 0")
        return found


def server_config(plan: FallbackPlan, profile: Path, primary_url: str, secondary_url: str) -> str:
    """The profile's text (kernel limits, store) and the router's tables after it.

    Raises:
        ValueError: the profile's kernel limits would queue or refuse some of `plan.users`'
            concurrent turns (the campaign measures the fallback, not the admission gate).
    """
    base = profile.read_text()
    kernel = tomllib.loads(base).get("kernel", {})
    gate, streams = kernel.get("max_in_flight_turns", 0), kernel.get("concurrency_limit", 0)
    if (gate and gate < plan.users) or (streams and streams < plan.users):
        raise ValueError(
            f"profile {str(profile)!r}: kernel.max_in_flight_turns ({gate}) and kernel.concurrency_limit ({streams}) "
            f"must be 0 or >= the {plan.users} users"
        )
    first_token_s = max(10.0, 3 * plan.mock.ttft_ms / 1000)
    router = f"""
# agentos bench fallback: one model, two targets in order
[providers.primary]
url = "{primary_url}"
max_retries = 0
first_token_timeout_s = {first_token_s:g}

[providers.secondary]
url = "{secondary_url}"
first_token_timeout_s = {first_token_s:g}

[models.{MODEL}]
targets = [{{provider = "primary", model = "mock-1"}}, {{provider = "secondary", model = "mock-1"}}]

[routing]
default_model = "{MODEL}"
breaker_failures = {plan.breaker_failures}
breaker_cooldown_s = {plan.breaker_cooldown_s:g}
breaker_probes = {plan.breaker_probes}
"""
    return base.rstrip() + "\n" + router
