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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import aiohttp

from agentos_bench.common.http import bench_http_session
from agentos_bench.common.mock_process import start_mock_process
from agentos_bench.common.processes import Child, start_server_process, stop_child
from agentos_bench.common.procfs import sample_tree
from agentos_bench.memory.heap import heap_sample
from agentos_bench.memory.plan import MEMORY_MOCK, MemoryPlan, default_profile, server_plan, tree_columns
from agentos_bench.memory.sandboxes import run_sandboxes
from agentos_bench.memory.summary import memory_report, summarize
from agentos_bench.memory.workloads import (
    WORKLOADS,
    Items,
    Sessions,
    WaitingRuns,
    parse_gauges,
    server_gauges,
)

__all__ = [
    "MEMORY_MOCK",
    "MemoryPlan",
    "default_profile",
    "memory_report",
    "parse_gauges",
    "run_memory",
    "server_gauges",
    "summarize",
]


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
        return tree_columns(tree, **extra) | await heap_sample(self.http, self.server.url)

    async def gauged(self, **extra: Any) -> dict[str, Any]:
        return await self.sample(**extra) | await server_gauges(self.http, self.server.url)


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
                return await run_sandboxes(plan, work_dir, mock.url)
            return await _with_server(plan, work_dir, mock.url)
        finally:
            await stop_child(mock.process)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)


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
