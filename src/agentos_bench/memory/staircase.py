"""`agentos bench memory`: the per-session memory staircase of the server's process tree.

Method: start the server; sample at start; pay the one-time costs with a throwaway session (one
turn, then deleted); sample the base; then add sessions one at a time, each with one completed
turn, and sample RSS and Private_Dirty of the server tree after a short settle (nothing is forced
in the server: no GC call, no debug endpoint). Then release: delete the first half of the
sessions and sample; let the rest expire by `session_ttl_secs` and sample again. The server's
own `agentos_active_sessions` and `agentos_sessions_evicted_total` (from `/metrics`) are recorded
with each release sample, so the report shows that the sessions really left memory.
The marginal cost is the least-squares slope of memory over sessions.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from agentos.mock.server import MockSettings
from agentos_bench.common.http import bench_http_session
from agentos_bench.common.mock_process import start_mock_process
from agentos_bench.common.processes import ServerPlan, resolve_profile, start_server_process, stop_child
from agentos_bench.common.procfs import TreeSample, sample_tree
from agentos_bench.load.targets import ServerTarget, delete_session
from agentos_bench.report.document import SCHEMA_VERSION
from agentos_bench.report.machine import report_head
from agentos_bench.report.stats import slope

_STEP_ESTIMATE_S = 0.1  # one session + one fast turn on this kind of machine; only sizes the default TTL
MEMORY_MOCK = MockSettings(ttft_ms=5.0, tps=2000.0, tokens=8)  # fast: the staircase measures memory, not time


@dataclass(frozen=True, kw_only=True)
class MemoryPlan:
    sessions: int = 200
    profile: str = "no-store"
    session_ttl_s: float | None = None  # None: long enough that no session expires during the climb
    settle_s: float = 0.1
    release_settle_s: float = 2.0

    @property
    def ttl_s(self) -> float:
        if self.session_ttl_s is not None:
            return self.session_ttl_s
        return max(20.0, round(self.sessions * (self.settle_s + _STEP_ESTIMATE_S) * 2 + 10))

    mock: MockSettings = MEMORY_MOCK
    command: str = ""


@dataclass(kw_only=True)
class _Staircase:
    plan: MemoryPlan
    sample: Callable[[], TreeSample]
    steps: list[dict[str, Any]] = field(default_factory=list)
    marks: dict[str, dict[str, float]] = field(default_factory=dict)
    failed_turns: int = 0
    top: dict[str, float] = field(default_factory=dict)  # the server's gauges at the top of the climb


def _mb(sample: TreeSample, **extra: Any) -> dict[str, Any]:
    return {
        **extra,
        "rss_mb": round(sample.rss_kb / 1024, 2),
        "private_dirty_mb": round(sample.private_dirty_kb / 1024, 2),
    }


async def _one_session(http: aiohttp.ClientSession, target: ServerTarget) -> tuple[str, bool]:
    session_id = await target.open_worker(http)
    sample = await target.turn(http, session_id, timeout_s=30.0)
    return str(session_id), sample.ok


async def _climb(stairs: _Staircase, http: aiohttp.ClientSession, target: ServerTarget) -> list[str]:
    settle = stairs.plan.settle_s
    throwaway, _ = await _one_session(http, target)
    await delete_session(http, target.base_url, throwaway)
    await asyncio.sleep(settle)
    stairs.steps.append(_mb(stairs.sample(), sessions=0))
    session_ids = []
    for count in range(1, stairs.plan.sessions + 1):
        session_id, ok = await _one_session(http, target)
        session_ids.append(session_id)
        stairs.failed_turns += 0 if ok else 1
        await asyncio.sleep(settle)
        stairs.steps.append(_mb(stairs.sample(), sessions=count))
        if count % 50 == 0:
            print(f"memory: {count} sessions, {stairs.steps[-1]}", file=sys.stderr, flush=True)
    stairs.top = await server_gauges(http, target.base_url)
    return session_ids


async def _release(
    stairs: _Staircase, http: aiohttp.ClientSession, target: ServerTarget, session_ids: list[str]
) -> None:
    half = len(session_ids) // 2
    await asyncio.gather(*(delete_session(http, target.base_url, s) for s in session_ids[:half]))
    await asyncio.sleep(stairs.plan.release_settle_s)
    stairs.marks["after_delete"] = _mb(stairs.sample(), sessions_deleted=half)
    stairs.marks["after_delete"] |= await server_gauges(http, target.base_url)
    await _wait_expired(http, target.base_url, deadline_s=stairs.plan.ttl_s * 2 + 15.0)
    await asyncio.sleep(stairs.plan.release_settle_s)
    stairs.marks["after_ttl"] = _mb(stairs.sample(), sessions_left_to_expire=len(session_ids) - half)
    stairs.marks["after_ttl"] |= await server_gauges(http, target.base_url)


async def _wait_expired(http: aiohttp.ClientSession, base_url: str, deadline_s: float) -> None:
    """Poll the server's `agentos_active_sessions` once a second until it is 0 (bounded)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + deadline_s
    while loop.time() < deadline:
        if (await server_gauges(http, base_url)).get("agentos_active_sessions", 0.0) == 0.0:
            return
        await asyncio.sleep(1.0)


_GAUGES = ("agentos_active_sessions", "agentos_sessions_evicted_total")


async def server_gauges(http: aiohttp.ClientSession, base_url: str) -> dict[str, float]:
    """The server's own session counters from `GET /metrics` (read-only; not counted as activity)."""
    try:
        async with http.get(f"{base_url}/metrics") as response:
            text = await response.text()
    except (aiohttp.ClientError, TimeoutError):
        return {}
    return parse_gauges(text, _GAUGES)


def parse_gauges(text: str, names: tuple[str, ...]) -> dict[str, float]:
    """Unlabelled samples named in `names` from Prometheus text (the first of each)."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in names and name not in found:
            try:
                found[name] = float(value.split()[0])
            except (ValueError, IndexError):
                continue
    return found


async def run_memory(plan: MemoryPlan) -> dict[str, Any]:
    """Start a mock and a server, climb the staircase, release, stop both; return the report."""
    work_dir = Path(tempfile.mkdtemp(prefix="agentos-memory-"))
    try:
        mock = await start_mock_process(plan.mock, work_dir)
        try:
            return await _with_server(plan, work_dir, mock.url)
        finally:
            await stop_child(mock.process)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)


async def _with_server(plan: MemoryPlan, work_dir: Path, mock_url: str) -> dict[str, Any]:
    server_plan = ServerPlan(
        profile_path=resolve_profile(plan.profile),
        provider_url=mock_url,
        data_dir=work_dir / "data",
        session_ttl_s=plan.ttl_s,
    )
    child = await start_server_process(server_plan, work_dir)
    stairs = _Staircase(plan=plan, sample=lambda: sample_tree(child.pid))
    try:
        await asyncio.sleep(plan.settle_s)
        start = _mb(stairs.sample())
        target = ServerTarget(child.url)
        async with bench_http_session() as http:
            session_ids = await _climb(stairs, http, target)
            await _release(stairs, http, target, session_ids)
    finally:
        await stop_child(child.process)
    return memory_report(stairs, start)


def summarize(steps: list[dict[str, Any]], marks: dict[str, dict[str, Any]], start: dict[str, Any]) -> dict[str, Any]:
    """Base, end, marginal cost per session and what was returned, for RSS and Private_Dirty."""
    climbing = [s for s in steps if s["sessions"] > 0]
    xs = [float(s["sessions"]) for s in climbing]
    summary: dict[str, Any] = {}
    for key, field_name in (("rss", "rss_mb"), ("private_dirty", "private_dirty_mb")):
        per_session = slope(xs, [s[field_name] for s in climbing])
        last_release = (marks.get("after_ttl") or marks.get("after_delete") or steps[-1])[field_name]
        summary.setdefault("start_mb", {})[key] = start[field_name]
        summary.setdefault("base_mb", {})[key] = steps[0][field_name]
        summary.setdefault("end_mb", {})[key] = steps[-1][field_name]
        summary.setdefault("marginal_kb_per_session", {})[key] = (
            None if per_session is None else round(per_session * 1024, 1)
        )
        summary.setdefault("after_delete_mb", {})[key] = marks.get("after_delete", {}).get(field_name)
        summary.setdefault("after_ttl_mb", {})[key] = marks.get("after_ttl", {}).get(field_name)
        summary.setdefault("returned_mb", {})[key] = round(steps[-1][field_name] - last_release, 2)
    return summary


_TOPOLOGY = (
    "one machine, loopback only: mock-llm (one process); server (one process tree, sampled); "
    "the bench client (one process)"
)


def memory_report(stairs: _Staircase, start: dict[str, Any]) -> dict[str, Any]:
    plan = stairs.plan
    return {
        "schema": SCHEMA_VERSION,
        **report_head("memory", _TOPOLOGY, plan.command),
        "profile": plan.profile,
        "profiles": [plan.profile],
        "mock": asdict(plan.mock),
        "sessions": plan.sessions,
        "session_ttl_s": plan.ttl_s,
        "top": stairs.top,
        "settle_s": plan.settle_s,
        "failed_turns": stairs.failed_turns,
        "start": start,
        "steps": stairs.steps,
        "release": stairs.marks,
        "summary": summarize(stairs.steps, stairs.marks, start),
    }
