"""`agentos bench memory`: the per-item memory staircase of the server's process tree.

Method: start the server; sample at start; pay the one-time costs with a throwaway item (for
sessions: one, then deleted; for waiting runs: one run followed to its end); sample the base; then
add items `step` at a time (`agentos_bench.memory.workloads`: idle sessions, sessions with one
completed turn, agent runs waiting for a human) and sample after a short settle. Each sample is
the tree's RSS and Private_Dirty and, beside them, the server's own figures from
`GET /v1/admin/memory` (`agentos_bench.memory.heap`: the interpreter's allocated blocks, the C
heap in use and free, the Python heap when `--tracemalloc` started the server with tracemalloc,
and the trims). Nothing is forced in the server: no GC call. Then release: for sessions, delete
the first half and sample, let the rest expire by `session_ttl_secs` and sample again (the
**reclaim**: what the reaper's evictions, and the server's `malloc_trim` after them, gave back);
for waiting runs, answer them all and sample once they ended. The server's
`agentos_active_sessions` and `agentos_sessions_evicted_total` (from `/metrics`) are recorded
with each release sample, so the report shows that the items really left memory. The marginal
cost is the least-squares slope of memory over items. Ready sandboxes are made by the server at
its start, so that workload starts one server per point (`agentos_bench.memory.sandboxes`).
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import aiohttp

from agentos.mock.server import MockSettings
from agentos_bench.common.http import bench_http_session
from agentos_bench.common.mock_process import start_mock_process
from agentos_bench.common.processes import Child, ServerPlan, resolve_profile, start_server_process, stop_child
from agentos_bench.common.procfs import TreeSample, sample_tree
from agentos_bench.memory.heap import heap_sample
from agentos_bench.memory.workloads import (
    RUNS_PROFILE,
    WORKLOADS,
    Items,
    Sessions,
    WaitingRuns,
    parse_gauges,
    server_gauges,
)
from agentos_bench.report.document import SCHEMA_VERSION
from agentos_bench.report.machine import report_head
from agentos_bench.report.stats import slope

__all__ = ["MEMORY_MOCK", "MemoryPlan", "parse_gauges", "run_memory", "server_gauges", "summarize"]

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


@dataclass(kw_only=True)
class _Staircase:
    plan: MemoryPlan
    server: Child
    http: aiohttp.ClientSession
    steps: list[dict[str, Any]] = field(default_factory=list)
    marks: dict[str, dict[str, Any]] = field(default_factory=dict)
    failed: int = 0  # items that did not come to be (a failed turn, a run that never waited)
    top: dict[str, float] = field(default_factory=dict)  # the server's gauges at the top of the climb

    async def sample(self, **extra: Any) -> dict[str, Any]:
        """The tree's memory, then the server's own figures (heap, trims)."""
        tree = sample_tree(self.server.pid)
        return _mb(tree, **extra) | await heap_sample(self.http, self.server.url)

    async def gauged(self, **extra: Any) -> dict[str, Any]:
        return await self.sample(**extra) | await server_gauges(self.http, self.server.url)


def _mb(sample: TreeSample, **extra: Any) -> dict[str, Any]:
    return {
        **extra,
        "rss_mb": round(sample.rss_kb / 1024, 2),
        "private_dirty_mb": round(sample.private_dirty_kb / 1024, 2),
    }


def _items(plan: MemoryPlan, base_url: str) -> Items:
    if plan.workload == "waiting":
        return WaitingRuns(base_url, timeout_s=60.0, settle_s=plan.release_settle_s)
    turn = plan.workload == "turn"
    return Sessions(base_url, turn=turn, ttl_s=plan.ttl_s, settle_s=plan.release_settle_s, input_bytes=plan.input_bytes)


async def _climb(stairs: _Staircase, items: Items) -> None:
    plan = stairs.plan
    await items.prepare(stairs.http)
    await asyncio.sleep(plan.settle_s)
    stairs.steps.append(await stairs.sample(items=0))
    count = 0
    while count < plan.sessions:
        size = min(plan.step, plan.sessions - count)
        results = [await items.add(stairs.http) for _ in range(size)]
        count += size
        stairs.failed += results.count(False)
        await asyncio.sleep(plan.settle_s)
        stairs.steps.append(await stairs.sample(items=count))
        if count % 50 < size:
            print(f"memory: {count} {plan.workload} items, {stairs.steps[-1]}", file=sys.stderr, flush=True)
    stairs.top = await server_gauges(stairs.http, stairs.server.url)


async def run_memory(plan: MemoryPlan) -> dict[str, Any]:
    """Start a mock and a server, climb the staircase, release, stop both; return the report."""
    if plan.workload not in WORKLOADS:
        raise ValueError(f"unknown workload {plan.workload!r} (one of {', '.join(WORKLOADS)})")
    if plan.workload == "waiting" and plan.mock.scenario != "tools":
        plan = replace(plan, mock=replace(plan.mock, scenario="tools"))  # the agent needs tool calls
    work_dir = Path(tempfile.mkdtemp(prefix="agentos-memory-"))
    try:
        mock = await start_mock_process(plan.mock, work_dir)
        try:
            if plan.workload == "sandbox":
                from agentos_bench.memory.sandboxes import run_sandboxes

                return await run_sandboxes(plan, work_dir, mock.url)
            return await _with_server(plan, work_dir, mock.url)
        finally:
            await stop_child(mock.process)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)


def server_plan(plan: MemoryPlan, work_dir: Path, mock_url: str, env: dict[str, str] | None = None) -> ServerPlan:
    return ServerPlan(
        profile_path=resolve_profile(plan.profile),
        provider_url=mock_url,
        data_dir=work_dir / "data",
        session_ttl_s=plan.ttl_s,
        env=plan.env | (env or {}),
    )


async def _with_server(plan: MemoryPlan, work_dir: Path, mock_url: str) -> dict[str, Any]:
    child = await start_server_process(server_plan(plan, work_dir, mock_url), work_dir)
    try:
        await asyncio.sleep(plan.settle_s)
        async with bench_http_session() as http:
            stairs = _Staircase(plan=plan, server=child, http=http)
            start = await stairs.sample()
            items = _items(plan, child.url)
            await _climb(stairs, items)
            for name, mark in (await items.release(http, stairs.gauged)).items():
                stairs.marks[name] = mark
    finally:
        await stop_child(child.process)
    return memory_report(plan, stairs.steps, stairs.marks, start, failed=stairs.failed, top=stairs.top)


# (summary key, step field): the tree's memory, then the server's figures where the steps have them
COLUMNS = (
    ("rss", "rss_mb"),
    ("private_dirty", "private_dirty_mb"),
    ("heap", "heap_mb"),
    ("malloc_used", "malloc_used_mb"),
    ("malloc_free", "malloc_free_mb"),
    ("blocks", "blocks"),
)


def step_items(step: dict[str, Any]) -> int:
    """The step's item count (reports before the workloads named it `sessions`)."""
    return int(step["items"] if "items" in step else step["sessions"])


def summarize(steps: list[dict[str, Any]], marks: dict[str, dict[str, Any]], start: dict[str, Any]) -> dict[str, Any]:
    """Base, end, marginal cost per item and what was returned, for each column the steps hold."""
    climbing = [s for s in steps if step_items(s) > 0]
    xs = [float(step_items(s)) for s in climbing]
    last_release = marks.get("after_ttl") or marks.get("after_end") or marks.get("after_delete") or {}
    summary: dict[str, Any] = {}
    for key, field_name in COLUMNS:
        if not climbing or any(s.get(field_name) is None for s in (steps[0], *climbing)):
            continue
        per_item = slope(xs, [s[field_name] for s in climbing])
        scale = 1 if field_name == "blocks" else 1024  # blocks per item; else KB per item
        summary.setdefault("start_mb", {})[key] = start.get(field_name)
        summary.setdefault("base_mb", {})[key] = steps[0][field_name]
        summary.setdefault("end_mb", {})[key] = steps[-1][field_name]
        summary.setdefault("marginal_kb_per_session", {})[key] = (
            None if per_item is None else round(per_item * scale, 1)
        )
        for mark in ("after_delete", "after_ttl", "after_end"):
            if mark in marks:
                summary.setdefault(f"{mark}_mb", {})[key] = marks[mark].get(field_name)
        if "after_delete" in marks and "after_ttl" in marks and marks["after_ttl"].get(field_name) is not None:
            reclaimed = marks["after_delete"][field_name] - marks["after_ttl"][field_name]
            summary.setdefault("ttl_returned_mb", {})[key] = round(reclaimed, 2)
        if last_release.get(field_name) is not None:
            summary.setdefault("returned_mb", {})[key] = round(steps[-1][field_name] - last_release[field_name], 2)
    return summary


_TOPOLOGY = (
    "one machine, loopback only: mock-llm (one process); server (one process tree, sampled); "
    "the bench client (one process)"
)


def memory_report(
    plan: MemoryPlan,
    steps: list[dict[str, Any]],
    marks: dict[str, dict[str, Any]],
    start: dict[str, Any],
    *,
    failed: int,
    top: dict[str, float],
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "schema": SCHEMA_VERSION,
        **report_head("memory", _TOPOLOGY, plan.command),
        "profile": plan.profile,
        "profiles": [plan.profile],
        "workload": plan.workload,
        "item": WORKLOADS[plan.workload],
        "step": plan.step,
        "input_bytes": plan.input_bytes,
        "tracemalloc": plan.tracemalloc,
        "server_env": dict(plan.server_env),
        "mock": asdict(plan.mock),
        "sessions": plan.sessions,
        "session_ttl_s": plan.ttl_s,
        "top": top,
        "settle_s": plan.settle_s,
        "failed_turns": failed,
        "start": start,
        "steps": steps,
        "release": marks,
        "summary": summarize(steps, marks, start) if steps else {},
        **(extra or {}),
    }
