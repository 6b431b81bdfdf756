"""`agentos bench sweep`: start what is needed, run every point, stop it all, write the report.

Usage::

    report = await run_sweep(SweepPlan(points=(1, 2, 4), profiles=("no-store",), command="..."))

Order: the mock starts once; the `direct` rows run first against it (the zero-overhead row of
this very run); then, per profile, a fresh server starts, runs every point, and stops.
An external server (`server_url`) or mock (`mock_url`) is used as given and never stopped.

Tenancy (`tenants`): 0, the default, is the single-tenant path: no admin token, no keys, every
session the default tenant's. With N > 0 each server starts with an admin token, the bench makes
N tenants with one key each through the admin API, and every point spreads its users over them
round-robin (`agentos.bench.load.sweep_tenants`). The direct rows are the same either way.
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
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from agentos.bench.common.http import bench_http_session
from agentos.bench.common.processes import (
    BenchSetupError,
    ServerPlan,
    resolve_profile,
    start_server_process,
    stop_child,
)
from agentos.bench.load.loadgen import PointPlan, Probes, run_point
from agentos.bench.load.sweep_tenants import make_tenant_keys, tenant_point_row
from agentos.bench.load.targets import DirectTarget, ServerTarget, Target
from agentos.bench.load.tenant_keys import AdminKeys
from agentos.bench.mock.process import start_mock_process
from agentos.bench.mock.server import MockSettings
from agentos.bench.report.document import SCHEMA_VERSION
from agentos.bench.report.machine import machine_info, utc_now, versions

DEFAULT_POINTS = (1, 2, 4, 8, 16, 32, 64)
BENCH_MOCK = MockSettings(ttft_ms=2000.0, tps=200.0, tokens=8)  # a turn ≈ 2.04 s, as in the reference bench
EXTERNAL = "external"


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


def _log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


@contextlib.asynccontextmanager
async def _mock(plan: SweepPlan, work_dir: Path) -> AsyncIterator[_Mock]:
    if plan.mock_url:
        yield _Mock(url=plan.mock_url.rstrip("/"), pid=plan.mock_pid)
        return
    child = await start_mock_process(plan.mock, work_dir)
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
    admin = AdminKeys() if run.plan.tenants else None
    plan = ServerPlan(
        profile_path=resolve_profile(profile),
        provider_url=mock.url,
        data_dir=run.work_dir / f"data-{profile}",
        env=admin.env if admin else {},
    )
    child = await start_server_process(plan, run.work_dir)
    _log(f"server ({profile}) pid {child.pid} at {child.url}")
    probes = Probes(server_pid=child.pid, mock_pid=mock.pid, mock_base_url=mock.base_url)
    try:
        await _points(run, await _server_measure(run.plan, http, child.url, probes, admin), profile)
    finally:
        code = await stop_child(child.process)
        if code not in (0, -15, None):
            run.notes.append(f"server ({profile}) exited with {code}; log kept at {child.log_path}")


async def _server_measure(
    plan: SweepPlan, http: aiohttp.ClientSession, url: str, probes: Probes, admin: AdminKeys | None
) -> Measure:
    """How a point is measured on this server: one target, or the users spread over the tenants.

    Raises:
        BenchSetupError: the server refused to make the bench's tenants or keys.
    """
    if admin is None:
        return _measure(ServerTarget(url), http, probes)
    try:
        keys = await make_tenant_keys(http, url, admin, plan.tenants)
    except (RuntimeError, aiohttp.ClientError) as exc:
        raise BenchSetupError(f"making {plan.tenants} tenants: {exc}") from exc
    _log(f"{len(keys)} tenants with one key each")

    async def measure(point: PointPlan) -> dict[str, Any]:
        return await tenant_point_row(url, keys, http, point, probes)

    return measure


async def run_sweep(plan: SweepPlan) -> dict[str, Any]:
    """Run the whole sweep and return the report (not yet written)."""
    work_dir = Path(tempfile.mkdtemp(prefix="agentos-bench-"))
    run = SweepRun(plan=plan, work_dir=work_dir)
    try:
        async with _mock(plan, work_dir) as mock, bench_http_session() as http:
            if plan.direct:
                direct_probes = Probes(mock_pid=mock.pid, mock_base_url=mock.base_url)
                await _points(run, _measure(DirectTarget(mock.url), http, direct_probes), None)
            if plan.server_url:
                probes = Probes(server_pid=plan.server_pid, mock_pid=mock.pid, mock_base_url=mock.base_url)
                admin = AdminKeys(os.environ.get("AGENTOS_API_TOKEN")) if plan.tenants else None
                await _points(run, await _server_measure(plan, http, plan.server_url, probes, admin), EXTERNAL)
            else:
                for profile in plan.profiles:
                    try:
                        await _server_rows(run, http, mock, profile)
                    except BenchSetupError as exc:  # keep the rows measured so far; say what is missing
                        run.notes.append(f"profile {profile!r} not measured: {exc}")
                        _log(run.notes[-1])
    finally:
        if plan.keep_data or run.notes:
            _log(f"data and logs kept in {work_dir}")
        else:
            shutil.rmtree(work_dir, ignore_errors=True)
    report = sweep_report(run)
    if plan.keep_data:
        report["kept_data"] = str(work_dir)  # data-<profile>/ per profile (the store), server.log
    return report


def sweep_report(run: SweepRun) -> dict[str, Any]:
    plan = run.plan
    profiles = [EXTERNAL] if plan.server_url else list(plan.profiles)
    return {
        "kind": "sweep",
        "schema": SCHEMA_VERSION,
        "created_utc": utc_now().isoformat(timespec="seconds"),
        "machine": machine_info(),
        "versions": versions(),
        "topology": _topology(plan),
        "profiles": profiles,
        "mock": asdict(plan.mock) if not plan.mock_url else {"url": plan.mock_url},
        "command": plan.command,
        "tenancy": tenancy(plan),
        "window": {"warmup_s": plan.warmup_s, "duration_s": plan.duration_s, "turn_timeout_s": plan.turn_timeout_s},
        "rows": run.rows,
        "notes": run.notes,
    }


def tenancy(plan: SweepPlan) -> dict[str, Any]:
    """What the report's header says about tenants: how many, and how the users were spread."""
    if not plan.tenants:
        return {"tenants": 0, "text": "single tenant: no admin token, no keys (the default tenant, open on loopback)"}
    return {
        "tenants": plan.tenants,
        "text": (
            f"{plan.tenants} tenants, one API key each (made through /v1/admin after start, the server "
            "started with an admin token); users assigned round-robin (user i -> tenant i mod "
            f"{plan.tenants}), every request with its tenant's key"
        ),
    }


def _topology(plan: SweepPlan) -> str:
    server = f"external server at {plan.server_url}" if plan.server_url else "server (one process per profile)"
    mock = f"external mock at {plan.mock_url}" if plan.mock_url else "mock-llm (one process, uvloop)"
    return (
        f"one machine, loopback only: {mock}; {server}; load generator (one process, uvloop, "
        "aiohttp TCPConnector(limit=0)); all three share the cores"
    )
