"""What one `agentos bench memory` measures (`MemoryPlan`), and the server it starts for it.

Its own module so that the staircase (`agentos_bench.memory.staircase`) and the ready-sandbox
points (`agentos_bench.memory.sandboxes`) both read it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentos.mock.server import MockSettings
from agentos_bench.common.processes import ServerPlan, resolve_profile
from agentos_bench.common.procfs import TreeSample
from agentos_bench.memory.workloads import RUNS_PROFILE

_STEP_ESTIMATE_S = 0.1  # one session + one fast turn on this kind of machine; only sizes the default TTL
MEMORY_MOCK = MockSettings(ttft_ms=5.0, tps=2000.0, tokens=8)  # fast: the staircase measures memory, not time


def default_profile(workload: str) -> str:
    return RUNS_PROFILE if workload in ("waiting", "sandbox") else "no-store"


@dataclass(frozen=True, kw_only=True)
class MemoryPlan:
    sessions: int = 200  # items: sessions, waiting runs or ready sandboxes
    workload: str = "turn"  # a key of WORKLOADS
    step: int = 1  # items added between two samples
    profile: str = "no-store"
    session_ttl_s: float | None = None  # None: long enough that no session expires during the climb
    settle_s: float = 0.1
    release_settle_s: float = 2.0
    tracemalloc: bool = False  # start the server with PYTHONTRACEMALLOC=1: the Python heap column
    server_env: tuple[tuple[str, str], ...] = ()  # added to the server's environment (`--server-env`)
    sandbox_points: int = 4  # `sandbox`: servers with 0, 1/n, ... n/n of `sessions` ready sandboxes
    input_bytes: int = 0  # `turn`: each turn's input, in bytes (0: "hello"); the transcript keeps it

    @property
    def ttl_s(self) -> float:
        if self.session_ttl_s is not None:
            return self.session_ttl_s
        return max(20.0, round(self.sessions * (self.settle_s + _STEP_ESTIMATE_S) * 2 + 10))

    @property
    def env(self) -> dict[str, str]:
        extra = {"PYTHONTRACEMALLOC": "1"} if self.tracemalloc else {}
        return extra | dict(self.server_env)

    mock: MockSettings = MEMORY_MOCK
    command: str = ""


def tree_columns(sample: TreeSample, **extra: Any) -> dict[str, Any]:
    return {
        **extra,
        "rss_mb": round(sample.rss_kb / 1024, 2),
        "private_dirty_mb": round(sample.private_dirty_kb / 1024, 2),
    }


def server_plan(plan: MemoryPlan, work_dir: Path, mock_url: str, env: dict[str, str] | None = None) -> ServerPlan:
    return ServerPlan(
        profile_path=resolve_profile(plan.profile),
        provider_url=mock_url,
        data_dir=work_dir / "data",
        session_ttl_s=plan.ttl_s,
        env=plan.env | (env or {}),
    )
