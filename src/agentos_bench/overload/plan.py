"""What an overload run does: its sizes, and the server's config file."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class OverloadPlan:
    """Attributes:
    max_in_flight: the server's `kernel.max_in_flight_turns` (the gate).
    offered: load workers posting turns at once (300 against a gate of 100: 3x overload).
    ttft_ms, tokens, tps: the mock provider: each admitted turn takes ttft + tokens / tps. Its
        first token comes after the warm-up and the probe window together (30 s against 21.5 s
        by default): no admitted turn ends while the probes run (the gate never has a free slot
        for one) and none streams (the server's CPU then is the probes' and refusals' alone).
    retry_pause_ms: a refused load worker's pause before it posts again (the Retry-After, 1 s).
    probes: fresh-connection turn probes (and as many /healthz probes).
    probe_interval_ms: between two probes (they alternate: turn, healthz, turn, ...).
    warmup_s: after the load starts, before the probes (the gate fills at once: the turns wait on the mock).
    request_timeout_s: the most one probe may take; a load request, a turn's length more.
    grace_s: after the probes, how long the load's admitted turns get to finish before they are cancelled.
    command: the command line, for the report.
    """

    max_in_flight: int = 100
    offered: int = 300
    ttft_ms: float = 30_000.0
    tokens: int = 5
    tps: float = 5.0
    retry_pause_ms: float = 1000.0
    probes: int = 500
    probe_interval_ms: float = 20.0
    warmup_s: float = 1.5
    request_timeout_s: float = 30.0
    grace_s: float = 10.0
    command: str = ""

    @property
    def window_s(self) -> float:
        """How long the probes take to send."""
        return 2 * self.probes * self.probe_interval_ms / 1000

    @property
    def turn_s(self) -> float:
        """How long one admitted turn takes at the mock."""
        return self.ttft_ms / 1000 + self.tokens / self.tps


def config_toml(plan: OverloadPlan) -> str:
    """The server's config file: the gate at `max_in_flight`, permits for every offered turn, SQLite store."""
    return (
        "# overload bench: the admission gate on, provider permits never the limit, store and access log on\n"
        'log_level = "warning"\n\n'
        f"[kernel]\nmax_in_flight_turns = {plan.max_in_flight}\nconcurrency_limit = {max(plan.offered, 1)}\n\n"
        "[server]\naccess_log = true\n\n[store]\nenabled = true\n"
    )
