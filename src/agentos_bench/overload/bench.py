"""The overload bench's method (see the package docstring): mock, server, load, then the probes.

Every process is a child of this one, on 127.0.0.1, stopped by its pid; every wait has a deadline.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import msgspec

from agentos.mock.server import MockSettings
from agentos_bench.common.http import bench_http_session
from agentos_bench.common.mock_process import start_mock_process
from agentos_bench.common.processes import ServerPlan, read_line, start_job_child, start_server_process, stop_child
from agentos_bench.common.procfs import sample_tree
from agentos_bench.load.targets import create_session
from agentos_bench.overload.load import Load
from agentos_bench.overload.plan import OverloadPlan, config_toml
from agentos_bench.overload.probe import Job

_SETUP_CONCURRENCY = 20  # sessions made at once


async def make_sessions(base_url: str, count: int) -> list[str]:
    async with bench_http_session() as http:
        gate = asyncio.Semaphore(_SETUP_CONCURRENCY)

        async def one() -> str:
            async with gate:
                return await create_session(http, base_url)

        return list(await asyncio.gather(*(one() for _ in range(count))))


async def start_probe(job: Job, work_dir: Path) -> asyncio.subprocess.Process:
    """The probe process, started and ready (it has printed `ready`)."""
    job_path = work_dir / "probe-job.json"
    job_path.write_bytes(msgspec.json.encode(job))
    process = await start_job_child("agentos_bench.overload.probe", job_path, work_dir / "probe.log")
    try:
        await read_line(process, 30.0, "overload probe", "'ready'")
    except BaseException:
        await stop_child(process)
        raise
    return process


async def run_probe(process: asyncio.subprocess.Process, timeout_s: float) -> dict[str, Any]:
    """`go` to a ready prober; its results (per kind, `turn` and `healthz`) within `timeout_s`."""
    assert process.stdin is not None
    process.stdin.write(b"go\n")
    await process.stdin.drain()
    result: dict[str, Any] = msgspec.json.decode(await read_line(process, timeout_s, "overload probe", "results"))
    return result


async def measure(plan: OverloadPlan, work_dir: Path, config: Path) -> dict[str, Any]:
    """Mock, server, sessions, the load, the probes under it; the raw figures for the report."""
    mock = await start_mock_process(MockSettings(ttft_ms=plan.ttft_ms, tps=plan.tps, tokens=plan.tokens), work_dir)
    try:
        server_plan = ServerPlan(profile_path=config, provider_url=mock.url, data_dir=work_dir / "data")
        server = await start_server_process(server_plan, work_dir)
        try:
            return await _under_load(plan, server.url, server.pid, work_dir)
        finally:
            await stop_child(server.process)
    finally:
        await stop_child(mock.process)


async def _under_load(plan: OverloadPlan, base_url: str, server_pid: int, work_dir: Path) -> dict[str, Any]:
    sessions = await make_sessions(base_url, plan.offered + 1)
    address = urlsplit(base_url)
    assert address.hostname is not None and address.port is not None
    job = Job(
        address.hostname, address.port, sessions[-1], plan.probes, plan.probe_interval_ms / 1000, plan.request_timeout_s
    )
    probe = await start_probe(job, work_dir)
    loadavg_before = os.getloadavg()
    try:
        async with bench_http_session() as http:
            load = Load(http, base_url, sessions[:-1], plan)
            load.start()
            try:
                await asyncio.sleep(plan.warmup_s)  # the gate fills at once; the turns wait on the mock
                cpu_before, refused_before = sample_tree(server_pid, memory=False).cpu_s, load.stats.refused
                probes = await run_probe(probe, plan.window_s + plan.request_timeout_s + 10)
                cpu_s = sample_tree(server_pid, memory=False).cpu_s - cpu_before
                refused_during = load.stats.refused - refused_before
                loadavg_after = os.getloadavg()
            finally:
                load.stop()
                await load.finish(plan.turn_s + plan.grace_s)
    finally:
        await stop_child(probe)
    return {
        "probes": probes,
        "load": load.stats.as_dict(),
        "server_cpu_s_during_probes": round(cpu_s, 3),
        "load_refusals_during_probes": refused_during,
        "loadavg_before": [round(v, 2) for v in loadavg_before],
        "loadavg_after": [round(v, 2) for v in loadavg_after],
    }


def run_overload(plan: OverloadPlan, work_dir: Path) -> dict[str, Any]:
    """The whole bench, on an event loop; then the report."""
    from agentos.mock.loop import run_loop
    from agentos_bench.overload.report import build_report

    work_dir.mkdir(parents=True, exist_ok=True)
    config = work_dir / "agentos.toml"
    config.write_text(config_toml(plan))
    return build_report(plan, run_loop(measure(plan, work_dir, config)))
