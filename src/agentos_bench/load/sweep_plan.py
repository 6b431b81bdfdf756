"""What `agentos bench sweep` runs (`SweepPlan`): the points, the profiles, the mock, the set-up.

`agentos_bench.load.sweep` runs a plan; `agentos_bench.load.sweep_header` writes the report's lines
about its set-up.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from agentos.mock.server import MockSettings
from agentos_bench.load.double_text import DoubleText
from agentos_bench.load.nodes import Spread
from agentos_bench.load.openai_target import Api
from agentos_bench.load.targets import Target

DEFAULT_POINTS = (1, 2, 4, 8, 16, 32, 64)
BENCH_MOCK = MockSettings(ttft_ms=2000.0, tps=200.0, tokens=8)  # a turn ≈ 2.04 s, as in the reference bench
EXTERNAL = "external"
# A peer (bench.peers, which stacks on this package): (name, mock URL, work dir, client, measure(target,
# pid)) -> its report entry. Handed in by the CLI, so the load package never imports the peers'.
PeerRunner = Callable[
    [str, str, Path, aiohttp.ClientSession, Callable[[Target, int], Awaitable[None]]], Awaitable[dict[str, Any]]
]


@dataclass(frozen=True, kw_only=True)
class SweepPlan:
    points: Sequence[int] = DEFAULT_POINTS
    profiles: Sequence[str] = ("no-store",)
    direct: bool = True
    duration_s: float = 15.0
    warmup_s: float = 3.0
    settle_s: float = 1.0
    turn_timeout_s: float = 60.0
    mock: MockSettings = BENCH_MOCK
    mock_url: str | None = None  # an already running mock (…/v1)
    mock_pid: int | None = None
    server_url: str | None = None  # an already running server: replaces `profiles`
    server_pid: int | None = None
    command: str = ""
    keep_data: bool = False
    tenants: int = 0  # 0: one tenant, no keys; N: N tenants with a key each, users round-robin
    idp_url: str = ""  # with tenants: each tenant's users sign in with a JWT from this bench IdP, not a key
    nodes: int = 1  # server processes per profile; >1 needs the postgres store and Redis (load.cluster)
    spread: Spread = "session"  # over the nodes: per session, or every turn to the next node (load.nodes)
    peers: Sequence[str] = ()  # peer servers measured after the profiles, on the same mock
    peer_runner: PeerRunner | None = None  # starts and measures one (bench.peers.launch.peer_runner)
    api: Api = "native"  # each turn via POST /v1/sessions/{id}/turns, or /v1/chat/completions (load.openai_target)
    double_text: DoubleText = "none"  # "enqueue": each turn a pair, the second enqueued (load.double_text)
    workers: int = 1  # `agentos serve --workers` for each profile's server (docs/deployment.md "Workers")
    server_cpus: str = ""  # taskset CPU lists (agentos_bench.common.pinning); empty: not pinned
    mock_cpus: str = ""
    loadgen_cpus: str = ""  # recorded in the report; the CLI pins this process (pinning.pin_self)
