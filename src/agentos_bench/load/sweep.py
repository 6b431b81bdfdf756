"""`agentos bench sweep`: start what is needed, run every point, stop it all, write the report.

Usage::

    report = await run_sweep(SweepPlan(points=(1, 2, 4), profiles=("no-store",), command="..."))

Order: the mock starts once; the `direct` rows run first against it (the zero-overhead row of
this very run); then, per profile, a fresh server starts, runs every point, and stops.
An external server (`server_url`) or mock (`mock_url`) is used as given and never stopped.

Tenancy (`tenants`): 0, the default, is the single-tenant path: no admin token, no keys, every
session the default tenant's. With N > 0 each server starts with an admin token, the bench makes
N tenants with one key each through the admin API, and every point spreads its users over them
round-robin (`agentos_bench.load.sweep_tenants`). The direct rows are the same either way.
An external server (`server_url`) with tenants needs its admin token in this process's
`AGENTOS_API_TOKEN`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from agentos_bench.common.http import bench_http_session
from agentos_bench.common.mock_process import start_mock_process
from agentos_bench.common.processes import BenchSetupError, ServerPlan, resolve_profile, stop_child
from agentos_bench.load.cluster import local_service_pids, profile_settings, start_nodes
from agentos_bench.load.loadgen import PointPlan, Probes, run_point
from agentos_bench.load.nodes import point_targets, provider_fields
from agentos_bench.load.sweep_header import cluster, tenancy, topology
from agentos_bench.load.sweep_plan import EXTERNAL, SweepPlan
from agentos_bench.load.sweep_tenants import make_tenant_keys, tenant_point_row
from agentos_bench.load.targets import DirectTarget, Target
from agentos_bench.load.tenant_keys import AdminKeys
from agentos_bench.report.document import SCHEMA_VERSION
from agentos_bench.report.machine import report_head


@dataclass(kw_only=True)
class _Mock:
    url: str
    pid: int | None

    @property
    def base_url(self) -> str:
        return self.url.removesuffix("/v1")


@dataclass(kw_only=True)
class SweepRun:
    plan: SweepPlan
    work_dir: Path
    rows: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    peers: list[dict[str, Any]] = field(default_factory=list)  # bench.peers.launch.peer_entry, per peer
    loadavg: dict[str, list[float]] = field(default_factory=dict)  # the machine's, at the start and the end


def _log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


@contextlib.asynccontextmanager
async def _mock(plan: SweepPlan, work_dir: Path) -> AsyncIterator[_Mock]:
    if plan.mock_url:
        yield _Mock(url=plan.mock_url.rstrip("/"), pid=plan.mock_pid)
        return
    child = await start_mock_process(plan.mock, work_dir, cpus=plan.mock_cpus)
    _log(f"mock-llm pid {child.pid} at {child.url}")
    try:
        yield _Mock(url=child.url, pid=child.pid)
    finally:
        await stop_child(child.process)


Measure = Callable[[PointPlan], Awaitable[dict[str, Any]]]  # one point -> its row


def _measure(target: Target, http: aiohttp.ClientSession, probes: Probes) -> Measure:
    async def measure(plan: PointPlan) -> dict[str, Any]:
        return (await run_point(target, http, plan, probes)).as_row()

    return measure


async def _points(run: SweepRun, measure: Measure, profile: str | None) -> None:
    for concurrency in run.plan.points:
        plan = PointPlan(
            concurrency=concurrency,
            warmup_s=run.plan.warmup_s,
            duration_s=run.plan.duration_s,
            turn_timeout_s=run.plan.turn_timeout_s,
        )
        row = {"profile": profile, **await measure(plan)}
        run.rows.append(row)
        _log(_progress(row))
        await asyncio.sleep(run.plan.settle_s)


def _progress(row: dict[str, Any]) -> str:
    return (
        f"{row['target']:>6} {row['profile'] or '':<10} c={row['concurrency']:<5} "
        f"{row['turns_per_s']:>8} turns/s  ttft p50 {row['ttft_ms']['p50']} ms  turn p95 {row['turn_ms']['p95']} ms  "
        f"failures {row['failures_total']}  server cpu {row.get('server_cpu_cores')}"
    )


async def _server_rows(run: SweepRun, http: aiohttp.ClientSession, mock: _Mock, profile: str) -> None:
    admin = AdminKeys(idp_url=run.plan.idp_url) if run.plan.tenants else None
    path = resolve_profile(profile)
    settings = profile_settings(path)
    plan = ServerPlan(
        profile_path=path,
        provider_url=mock.url,
        data_dir=run.work_dir / f"data-{profile}",
        env=admin.env if admin else {},
        log_name=f"server-{path.stem}",
        cpus=run.plan.server_cpus,
        workers=run.plan.workers,
    )
    count, spread = run.plan.nodes, run.plan.spread
    async with start_nodes(plan, count, settings, run.work_dir, run.notes, keep=run.plan.keep_data) as nodes:
        where = f"schema {nodes.namespace.schema or '-'}, Redis prefix {nodes.namespace.key_prefix or '-'}"
        _log(f"server ({profile}) pids {list(nodes.pids)} at {nodes.urls}; {where}")
        services = local_service_pids(settings)
        probes = Probes(server_pids=nodes.pids, mock_pid=mock.pid, mock_base_url=mock.base_url, service_pids=services)
        measure = await _server_measure(run.plan, http, nodes.urls, probes, admin)

        async def with_limit(point: PointPlan) -> dict[str, Any]:
            row = await measure(point)
            return row | provider_fields(row, settings.kernel.concurrency_limit, count, spread)

        await _points(run, with_limit, profile)


async def _server_measure(
    plan: SweepPlan, http: aiohttp.ClientSession, urls: list[str], probes: Probes, admin: AdminKeys | None
) -> Measure:
    """How a point is measured on these nodes: one target, or the users spread over the tenants.

    Raises:
        BenchSetupError: a node refused to make the bench's tenants or keys.
    """
    if admin is None:

        async def plain(point: PointPlan) -> dict[str, Any]:
            (target,) = point_targets(urls, plan.spread, api=plan.api, double_text=plan.double_text)
            return (await run_point(target, http, point, probes)).as_row()

        return plain
    try:  # each node makes its own key of each tenant (works with tenants per node or shared)
        keys = [await make_tenant_keys(http, url, admin, plan.tenants) for url in urls]
    except (RuntimeError, aiohttp.ClientError) as exc:
        raise BenchSetupError(f"making {plan.tenants} tenants: {exc}") from exc
    how = f"one user signed in at {plan.idp_url}" if plan.idp_url else "one key"
    _log(f"{plan.tenants} tenants with {how} each (per node)")

    async def measure(point: PointPlan) -> dict[str, Any]:
        targets = point_targets(urls, plan.spread, keys, plan.api, plan.double_text)
        return await tenant_point_row(targets, http, point, probes)

    return measure


async def _peer_rows(run: SweepRun, http: aiohttp.ClientSession, mock: _Mock, name: str) -> None:
    """A peer's rows, on the same mock and points; a peer that is missing or fails is reported, not raised."""

    async def measure(target: Target, pid: int) -> None:
        _log(f"peer {name} pid {pid}")
        probes = Probes(server_pid=pid, mock_pid=mock.pid, mock_base_url=mock.base_url)
        await _points(run, _measure(target, http, probes), f"peer:{name}")

    if run.plan.peer_runner is None:
        raise BenchSetupError("a sweep with peers needs a peer runner (agentos_bench.peers.launch.peer_runner)")
    entry = await run.plan.peer_runner(name, mock.url, run.work_dir, http, measure)
    run.peers.append(entry)
    if not entry["measured"]:
        _log(f"peer {name!r} not measured: {entry['reason']}")
        if entry["version"]:  # it is installed but did not start: its log is in the kept data
            run.notes.append(f"peer {name!r} not measured: {entry['reason']}")


async def run_sweep(plan: SweepPlan) -> dict[str, Any]:
    """Run the whole sweep and return the report (not yet written)."""
    work_dir = Path(tempfile.mkdtemp(prefix="agentos-bench-"))
    run = SweepRun(plan=plan, work_dir=work_dir)
    run.loadavg["start"] = _loadavg()
    try:
        async with _mock(plan, work_dir) as mock, bench_http_session() as http:
            if plan.direct:
                direct_probes = Probes(mock_pid=mock.pid, mock_base_url=mock.base_url)
                await _points(run, _measure(DirectTarget(mock.url), http, direct_probes), None)
            if plan.server_url:
                probes = Probes(server_pid=plan.server_pid, mock_pid=mock.pid, mock_base_url=mock.base_url)
                admin = AdminKeys(os.environ.get("AGENTOS_API_TOKEN"), idp_url=plan.idp_url) if plan.tenants else None
                await _points(run, await _server_measure(plan, http, [plan.server_url], probes, admin), EXTERNAL)
            else:
                for profile in plan.profiles:
                    try:
                        await _server_rows(run, http, mock, profile)
                    except BenchSetupError as exc:  # keep the rows measured so far; say what is missing
                        run.notes.append(f"profile {profile!r} not measured: {exc}")
                        _log(run.notes[-1])
            for name in plan.peers:
                await _peer_rows(run, http, mock, name)
    finally:
        run.loadavg["end"] = _loadavg()
        if plan.keep_data or run.notes:
            _log(f"data and logs kept in {work_dir}")
        else:
            shutil.rmtree(work_dir, ignore_errors=True)
    report = sweep_report(run)
    if plan.keep_data:
        report["kept_data"] = str(work_dir)  # data-<profile>/[node<i>/] (the store), server-<profile>[-node<i>].log
    return report


def _loadavg() -> list[float]:
    """1, 5 and 15 minute load averages: on a shared machine, how much else wanted the cores."""
    return [round(v, 2) for v in os.getloadavg()]


def sweep_report(run: SweepRun) -> dict[str, Any]:
    plan = run.plan
    profiles = [EXTERNAL] if plan.server_url else list(plan.profiles)
    return {
        "schema": SCHEMA_VERSION,
        **report_head("sweep", topology(plan), plan.command),
        "api": plan.api,
        "double_text": plan.double_text,
        "profiles": profiles,
        "mock": asdict(plan.mock) if not plan.mock_url else {"url": plan.mock_url},
        "tenancy": tenancy(plan),
        "cluster": cluster(plan),
        "window": {"warmup_s": plan.warmup_s, "duration_s": plan.duration_s, "turn_timeout_s": plan.turn_timeout_s},
        "rows": run.rows,
        "peers": run.peers,
        "loadavg": run.loadavg,
        "notes": run.notes,
    }
