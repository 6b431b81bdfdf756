"""What one `agentos bench runs` measures: the points, the waiting point, the mock and the profile.

Its own module so that the bench (`agentos_bench.runs.bench`) and its waiting point
(`agentos_bench.runs.waiting`) both read it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentos.mock.server import MockSettings

RUNS_MOCK = MockSettings(ttft_ms=200.0, tps=200.0, tokens=8, scenario="tools")


@dataclass(frozen=True, kw_only=True)
class RunsPlan:
    points: tuple[int, ...] = (100, 1000)
    answer_delay_s: float = 1.0
    run_timeout_s: float = 120.0  # per run, start call to terminal event
    waiting_runs: int = 1000  # 0: no waiting point
    waiting_batches: int = 4  # the waiting runs start in this many bursts, memory sampled after each
    waiting_timeout_s: float = 120.0  # to reach waiting_human, and again to finish after the answers
    settle_s: float = 1.0
    profile: str = "runs"
    agent: str = "bench"
    mock: MockSettings = RUNS_MOCK
    command: str = ""
    ramp_s: float = 0.0  # a point's runs start evenly over this long (0: all at once)
    campaign: str | None = None  # `runs.campaigns`: run twice, judged for noise
