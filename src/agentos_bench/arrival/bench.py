"""One open-arrival run: the mock and the server as processes of their own (or a deployment
already running: `run_deployment`, `deployment.py`), the fixture, the schedule sent on time, CPU
sampled throughout, the fixture removed, one result dict.

The generator is this process (its own CPU is a group of the report); the server and the mock
are children started here, bound to 127.0.0.1, stopped by their pids. The admin key exists only
in memory and in the server's environment; the tenant key only in memory.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from agentos.mock.server import MockSettings
from agentos_bench.arrival.dispatch import START_DELAY_S, dispatch
from agentos_bench.arrival.fixture import create_fixture, preflight, remove_fixture
from agentos_bench.arrival.loads import Loads
from agentos_bench.arrival.scenario import Scenario
from agentos_bench.arrival.schedule import build_schedule, plan_phases
from agentos_bench.arrival.summary import summarize
from agentos_bench.common.cpu import CpuSamples, Reader, local_reader, sample_cpu
from agentos_bench.common.deployment import Deployment, DeploymentReader, DeploymentSamples, cpu_samples_for
from agentos_bench.common.mock_process import start_mock_process
from agentos_bench.common.processes import ServerPlan, start_server_process, stop_child

DRAIN_S = 30.0  # after the last request is due, those still in flight get this long, then are abandoned


@dataclass(frozen=True, kw_only=True)
class LoadPlan:
    scenario: Scenario
    scale: float = 1.0
    rate_multiplier: float = 1.0
    connections: int | None = None  # None: the scenario's (peak rate x longest timeout)
    mock: MockSettings = MockSettings(ttft_ms=200.0, tps=100.0, tokens=16, scenario="tools")
    drain_s: float = DRAIN_S
    command: str = ""

    @property
    def connection_limit(self) -> int:
        return self.connections or self.scenario.connection_limit(self.rate_multiplier)


async def run_load(plan: LoadPlan, work_dir: Path) -> dict[str, Any]:
    """Raises: PreflightError, BenchSetupError (nothing was measured)."""
    admin_token = secrets.token_urlsafe(32)
    config = work_dir / "server.toml"
    config.write_text("# agentos bench load: the server's defaults\n")
    load_before = os.getloadavg()[0]
    mock = await start_mock_process(plan.mock, work_dir)
    try:
        server_plan = ServerPlan(
            profile_path=config,
            provider_url=mock.url,
            data_dir=work_dir / "data",
            env={"AGENTOS_API_TOKEN": admin_token},
        )
        server = await start_server_process(server_plan, work_dir)
        try:
            target = Deployment(urls=(server.url,), admin_token=admin_token, mock_url=mock.url)
            result = await _measure(plan, target, CpuSamples(), local_reader(server.pid, mock.pid))
        finally:
            await stop_child(server.process)
    finally:
        await stop_child(mock.process)
    result["load_average"] = {"before_1m": round(load_before, 2), "after_1m": round(os.getloadavg()[0], 2)}
    return result


async def run_deployment(plan: LoadPlan, deployment: Deployment) -> dict[str, Any]:
    """The same run against nodes already running (`--server-url`); their figures from /metrics.

    Raises: PreflightError, DeploymentError (nothing was measured)."""
    load_before = os.getloadavg()[0]
    samples = DeploymentSamples(deployment.node_names)
    async with aiohttp.ClientSession() as scraper, DeploymentReader(deployment, scraper, samples).opened() as reader:
        result = await _measure(plan, deployment, cpu_samples_for(deployment), reader)
    windows = plan_phases(plan.scenario, plan.scale, plan.rate_multiplier)
    result["deployment"] = {"by_phase": samples.by_phase(windows), "timeline": samples.timeline()}
    result["load_average"] = {"before_1m": round(load_before, 2), "after_1m": round(os.getloadavg()[0], 2)}
    return result


async def _measure(plan: LoadPlan, target: Deployment, cpu: CpuSamples, reader: Reader) -> dict[str, Any]:
    limit = plan.connection_limit
    url = target.urls[0]  # the fixture is made through the first node; every node sees it
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {target.admin_token}"}) as admin:
        await preflight(admin, target.urls, target.mock_url)
        fixture = await create_fixture(admin, url)
        fixture.urls = target.urls
        try:
            async with (
                aiohttp.ClientSession(connector=_connector(limit), headers=fixture.headers) as http,
                aiohttp.ClientSession(connector=_connector(limit)) as anonymous,
            ):
                loads = Loads(http, anonymous, fixture, run_timeout_s=_run_timeout(plan))
                result = await _send(plan, loads, cpu, reader)
        finally:
            cleanup_failures = await remove_fixture(admin, fixture)
    result["fixture_cleanup_failures"] = cleanup_failures
    return result


def _connector(limit: int) -> aiohttp.TCPConnector:
    return aiohttp.TCPConnector(limit=limit, limit_per_host=0, ttl_dns_cache=None)


async def _send(plan: LoadPlan, loads: Loads, cpu: CpuSamples, reader: Reader) -> dict[str, Any]:
    windows = plan_phases(plan.scenario, plan.scale, plan.rate_multiplier)
    offers = build_schedule(plan.scenario, plan.scale, plan.rate_multiplier)
    timeouts = {load.kind: load.timeout_s for load in plan.scenario.loads}
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    t0 = loop.time() + START_DELAY_S  # one time base for the schedule and the CPU samples
    sampler = asyncio.create_task(sample_cpu(cpu, lambda: loop.time() - t0, reader, stop))
    try:
        limit, drain = plan.connection_limit, plan.drain_s
        samples, stats = await dispatch(
            offers, loads.send, timeouts=timeouts, connection_limit=limit, drain_s=drain, start_at=t0
        )
    finally:
        stop.set()
        await sampler
    result = summarize(plan.scenario, windows, offers, samples, stats, plan.connection_limit)
    result["cpu"] = _cpu_table(cpu, windows)
    result["timeline"] = _timeline(samples)
    return result


def _run_timeout(plan: LoadPlan) -> float:
    runs = [load.timeout_s for load in plan.scenario.loads if load.kind == "agent_run"]
    return runs[0] if runs else 90.0


def _cpu_table(cpu: CpuSamples, windows: list[Any]) -> dict[str, Any]:
    groups = cpu.groups
    by_phase = {w.name: {g: _round(cpu.cores(g, w.start_s, w.end_s)) for g in groups} for w in windows}
    return {
        "cores_by_phase": by_phase,
        "peak_cores": {g: _round(cpu.peak_cores(g)) for g in groups},
        "samples": len(cpu.times_s),
    }


def _timeline(samples: list[Any]) -> list[list[Any]]:
    """[due_s, kind, latency_ms or None (failed), first_token_ms or None] per request: the plot's data."""
    return [
        [
            round(s.due_s, 3),
            s.kind,
            round(s.latency_s * 1000, 1) if s.ok else None,
            None if s.first_token_s is None else round(s.first_token_s * 1000, 1),
        ]
        for s in samples
    ]


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
