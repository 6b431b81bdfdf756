"""The `sandbox` workload of `agentos bench memory`: ready sandboxes, one server per point.

A server makes its ready sandboxes (`sandbox.ready_sandboxes`) from its start, one at a time, so
one server cannot be sampled between them. Each point is a server of its own with 0, n/k, ...,
n ready sandboxes (`sessions` = n, `sandbox_points` = k): started, one agent run followed to its
end (the fork server and its first command paid for, as at every point), then the bench waits
until `agentos_sandbox_ready` counts them all (bounded), settles and samples. The slope over the
points is the cost of one ready sandbox.

Ready sandboxes need a server that runs as root with namespaces (docs/security.md): where the
first point with sandboxes gets none, the workload stops and says why in the report (`skipped`,
with the server's `/readyz` sandbox status) instead of measuring a pool that is not there.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import aiohttp

from agentos_bench.common.http import bench_http_session
from agentos_bench.common.processes import Child, start_server_process, stop_child
from agentos_bench.common.procfs import sample_tree
from agentos_bench.memory.heap import heap_sample
from agentos_bench.memory.plan import MemoryPlan, server_plan, tree_columns
from agentos_bench.memory.summary import memory_report
from agentos_bench.memory.workloads import server_gauges
from agentos_bench.runs.client import RunTarget, drive_run

_READY_BASE_S, _READY_PER_SANDBOX_S = 10.0, 0.5  # the wait for a pool to fill, bounded


def point_sizes(sandboxes: int, points: int) -> list[int]:
    """0 and `points` sizes up to `sandboxes`, distinct, ascending (`[0, 8, 16, 24, 32]`)."""
    points = max(1, min(points, sandboxes)) if sandboxes else 0
    return sorted({0, *(round(sandboxes * i / points) for i in range(1, points + 1))})


async def wait_pool(http: aiohttp.ClientSession, base_url: str, size: int) -> float:
    """Poll `agentos_sandbox_ready` until it reaches `size` or the bound passes; the last count."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _READY_BASE_S + _READY_PER_SANDBOX_S * size
    ready = 0.0
    while loop.time() < deadline:
        ready = (await server_gauges(http, base_url)).get("agentos_sandbox_ready", 0.0)
        if ready >= size:
            return ready
        await asyncio.sleep(0.2)
    return ready


async def _sandbox_status(http: aiohttp.ClientSession, base_url: str) -> Any:
    try:
        async with http.get(f"{base_url}/readyz") as response:
            return (await response.json()).get("sandbox")
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None


async def _point(plan: MemoryPlan, work_dir: Path, mock_url: str, size: int) -> tuple[dict[str, Any], str | None]:
    """One server with `size` ready sandboxes: its sample, or why there is none."""
    env = {"AGENTOS_SANDBOX_READY_SANDBOXES": str(size)}
    point_dir = work_dir / f"sandboxes-{size}"
    point_dir.mkdir()
    child: Child = await start_server_process(server_plan(plan, point_dir, mock_url, env), point_dir)
    try:
        async with bench_http_session() as http:
            await drive_run(http, RunTarget(child.url), answer_delay_s=0.0, timeout_s=60.0)
            ready = await wait_pool(http, child.url, size)
            if ready < size:
                status = await _sandbox_status(http, child.url)
                why = f"{int(ready)} of {size} ready sandboxes came (euid {os.geteuid()}, /readyz sandbox {status})"
                return {}, why
            await asyncio.sleep(plan.settle_s)
            sample = tree_columns(sample_tree(child.pid), items=int(ready)) | await heap_sample(http, child.url)
            return sample, None
    finally:
        await stop_child(child.process)


async def run_sandboxes(plan: MemoryPlan, work_dir: Path, mock_url: str) -> dict[str, Any]:
    steps: list[dict[str, Any]] = []
    skipped: str | None = None
    sizes = point_sizes(plan.sessions, plan.sandbox_points)
    for size in sizes:
        sample, skipped = await _point(plan, work_dir, mock_url, size)
        if skipped is not None:
            break
        steps.append(sample)
    start = steps[0] if steps else {}
    extra = {"points": sizes, "skipped": skipped}
    return memory_report(plan, steps if skipped is None else [], {}, start, failed=0, top={}, extra=extra)
