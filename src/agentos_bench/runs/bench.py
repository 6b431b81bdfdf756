"""`agentos bench runs`: N concurrent agent runs of the mock's `tools` scenario, and waiting runs.

Method. Start the mock (`tools` scenario: two `run_command` calls, `ask_human`, a final answer)
and the server with the `runs` profile. For each point N: start N runs at once, follow each
over its own SSE connection, answer its question after `answer_delay_s`, and record per run the
start-call latency and the duration (start call sent -> terminal event). Around the point, the
server's process tree (the sandbox fork server and its commands included) is sampled: CPU as the
delta of cumulative CPU time, memory (RSS, Private_Dirty) every 0.5 s for the peak and once at
the end. Steps are the results the server journals: model calls (the mock's request counter over
the point) plus `tool.result` and `human.answered` events seen on the streams.

Waiting point: on a fresh server, runs parked on a human (method in `agentos_bench.runs.waiting`).
Everything is bounded by deadlines; every process is stopped by its pid.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import aiohttp

from agentos_bench.common.cpu import GROUPS, CpuSamples, local_reader, sample_cpu
from agentos_bench.common.http import bench_http_session
from agentos_bench.common.mock_process import start_mock_process
from agentos_bench.common.processes import (
    Child,
    ServerPlan,
    resolve_profile,
    start_server_process,
    stop_child,
)
from agentos_bench.common.procfs import TreeSample, sample_tree, self_cpu_s
from agentos_bench.load.cluster import local_services, profile_settings
from agentos_bench.report.document import SCHEMA_VERSION
from agentos_bench.report.machine import report_head
from agentos_bench.report.stats import percentiles_ms
from agentos_bench.runs.client import (
    FAILURE_KINDS,
    PHASE_ENDED_BY,
    RunOutcome,
    RunTarget,
    drive_run,
)
from agentos_bench.runs.plan import RunsPlan
from agentos_bench.runs.probes import mb, own_cpu_s, peak_sampling
from agentos_bench.runs.waiting import measure_waiting

_UNPACED_TPS = 100_000.0  # the contract check's twin mock: tokens as fast as the mock writes them

STEPS_COUNTED_AS = (
    "model calls (the mock's request counter over the point) + `tool.result` events + `human.answered` "
    "events seen on the runs' streams: the results the server journals, one step each"
)


async def _mock_call(http: aiohttp.ClientSession, mock: Child, method: str, path: str) -> dict[str, Any]:
    base = mock.url.removesuffix("/v1")
    try:
        async with http.request(method, f"{base}{path}") as response:
            data: dict[str, Any] = await response.json()
            return data
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return {}


async def measure_point(
    plan: RunsPlan, n: int, server: Child, mock: Child, services: Mapping[str, Sequence[int]] | None = None
) -> dict[str, Any]:
    """N runs (at once, or over the plan's ramp), each followed to its end; the point's row."""
    services = services or {}
    loop = asyncio.get_running_loop()
    target = RunTarget(server.url, agent=plan.agent)
    async with bench_http_session() as http:
        await _mock_call(http, mock, "POST", "/stats/reset")
        before, main_before = sample_tree(server.pid), own_cpu_s(server.pid)
        floor = await _healthz_burst(http, server.url, n)
        mock_before, client_before = sample_tree(mock.pid, False).cpu_s, self_cpu_s()
        started = loop.time()
        cpu_samples, stop = CpuSamples(groups=(*GROUPS, *services)), asyncio.Event()
        reader = local_reader(server.pid, mock.pid, services)
        cpu_sampler = asyncio.create_task(sample_cpu(cpu_samples, lambda: loop.time() - started, reader, stop))
        async with peak_sampling(server.pid) as sampler:
            try:
                outcomes = await asyncio.gather(*(_drive(http, target, plan, i * plan.ramp_s / n) for i in range(n)))
            finally:
                stop.set()
                await cpu_sampler
            wall_s = loop.time() - started
            end, main_end = sample_tree(server.pid), own_cpu_s(server.pid)
            mock_end, client_end = sample_tree(mock.pid, False).cpu_s, self_cpu_s()
        mock_stats = await _mock_call(http, mock, "GET", "/stats")
    cpu = {"server_main_cpu_s": main_end - main_before, "mock_cpu_s": mock_end - mock_before}
    return point_row(
        n,
        list(outcomes),
        wall_s=wall_s,
        server=(before, end, sampler.peak),
        mock_stats=mock_stats,
        cpu=cpu | {"client_cpu_s": client_end - client_before},
    ) | {"healthz_burst_ms": floor, **cpu_by_service(cpu_samples, peak_concurrency(plan.ramp_s, outcomes))}


def peak_concurrency(ramp_s: float, outcomes: Sequence[RunOutcome]) -> int:
    """The most runs alive at one moment: run i starts at i x ramp / N and lives its duration (a
    run that did not complete counts as alive to the end). Over a ramp, N runs are not all alive
    at once: 200 light runs of 0.75 s over 60 s are about 3."""
    n = len(outcomes)
    ends = [o.duration_s if o.ok and o.duration_s is not None else float("inf") for o in outcomes]
    edges = sorted([(i * ramp_s / n, 1) for i in range(n)] + [(i * ramp_s / n + d, -1) for i, d in enumerate(ends)])
    alive = peak = 0
    for _, step in edges:  # at a tie the end (-1) sorts first: a run ending as the next starts is not two
        alive += step
        peak = max(peak, alive)
    return peak


def cpu_by_service(cpu: CpuSamples, runs: int) -> dict[str, Any]:
    """Each group's peak and mean cores at 1 s resolution (server, its sandboxes, mock, this
    client, and PostgreSQL/Redis where the profile uses them on this machine), the peak of their
    sum (the bench client's left out: it is the load, not the service), and capacity in runs per
    core: `runs` (the most alive at once) over that peak (the seed's "~20 runs per core":
    concurrent runs a core carries at this profile's peak)."""
    peak_total = cpu.peak_total_cores(exclude=("generator",))
    return {
        "cpu_peak_cores": {g: _r3(cpu.peak_cores(g)) for g in cpu.groups},
        "cpu_mean_cores": {g: _r3(cpu.mean_cores(g)) for g in cpu.groups},
        "cpu_peak_total_cores": _r3(peak_total),
        "peak_concurrent_runs": runs,
        "runs_per_core": round(runs / peak_total, 1) if peak_total else None,
    }


def _r3(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


async def _healthz_burst(http: aiohttp.ClientSession, base_url: str, n: int) -> dict[str, float | None]:
    """N concurrent `GET /healthz` over warmed connections: the floor under a start call's latency."""
    loop = asyncio.get_running_loop()

    async def one() -> float:
        sent = loop.time()
        async with http.get(f"{base_url}/healthz") as response:
            await response.read()
        return loop.time() - sent

    await asyncio.gather(*(one() for _ in range(n)))  # opens and warms N connections
    return percentiles_ms(list(await asyncio.gather(*(one() for _ in range(n)))))


async def _drive(http: aiohttp.ClientSession, target: RunTarget, plan: RunsPlan, delay_s: float = 0.0) -> RunOutcome:
    if delay_s > 0:  # its place in the ramp
        await asyncio.sleep(delay_s)
    return await drive_run(http, target, answer_delay_s=plan.answer_delay_s, timeout_s=plan.run_timeout_s)


def point_row(
    n: int,
    outcomes: Sequence[RunOutcome],
    *,
    wall_s: float,
    server: tuple[TreeSample, TreeSample, TreeSample],
    mock_stats: dict[str, Any],
    cpu: dict[str, float],
) -> dict[str, Any]:
    """One point of the report, from the runs' outcomes and the samples around them (pure)."""
    before, end, peak = server
    ok = [o for o in outcomes if o.ok]
    failures = Counter(o.failure for o in outcomes if o.failure)
    model_calls = int(mock_stats.get("requests", 0))
    tool_results = sum(o.tool_results for o in outcomes)
    human_answers = sum(o.human_answers for o in outcomes)
    steps = model_calls + tool_results + human_answers
    server_cpu_s = end.cpu_s - before.cpu_s
    return {
        "runs": n,
        "completed": len(ok),
        "failures": {kind: failures[kind] for kind in FAILURE_KINDS if failures[kind]},
        "failures_total": sum(failures.values()),
        "start_ms": percentiles_ms([o.start_s for o in outcomes if o.start_s is not None]),
        "duration_ms": percentiles_ms([o.duration_s for o in ok if o.duration_s is not None]),
        "phase_ms": phase_percentiles(ok),
        "duration_min_ms": round(min(o.duration_s or 0.0 for o in ok) * 1000, 1) if ok else None,
        "wall_s": round(wall_s, 2),
        "model_calls": model_calls,
        "tool_results": tool_results,
        "human_answers": human_answers,
        "steps": steps,
        "steps_per_s": round(steps / wall_s, 1) if wall_s > 0 else None,
        "mock_max_concurrent": mock_stats.get("max_concurrent"),
        "server_cpu_s": round(server_cpu_s, 2),
        "server_cpu_cores": round(server_cpu_s / wall_s, 3) if wall_s > 0 else None,
        "server_cpu_ms_per_run": round(server_cpu_s * 1000 / len(ok), 2) if ok else None,
        "server_cpu_ms_per_step": round(server_cpu_s * 1000 / steps, 2) if steps else None,
        "server_main_cpu_s": round(cpu["server_main_cpu_s"], 2),
        "server_main_cpu_cores": round(cpu["server_main_cpu_s"] / wall_s, 3) if wall_s > 0 else None,
        "server_rss_mb_before": mb(before.rss_kb),
        "server_rss_mb_peak": mb(peak.rss_kb),
        "server_rss_mb_end": mb(end.rss_kb),
        "server_private_dirty_mb_before": mb(before.private_dirty_kb),
        "server_private_dirty_mb_peak": mb(peak.private_dirty_kb),
        "server_private_dirty_mb_end": mb(end.private_dirty_kb),
        "server_processes_peak": peak.processes,
        "human": human_summary(outcomes),
        "mock_cpu_s": round(cpu["mock_cpu_s"], 2),
        "client_cpu_s": round(cpu["client_cpu_s"], 2),
    }


def human_summary(outcomes: Sequence[RunOutcome]) -> dict[str, Any]:
    """How the runs met their human: the share that paused, the questions answered, the mean wait
    (from the question's arrival to the run going on, the answer delay included)."""
    waits = [s for o in outcomes for s in o.phases.get("human_wait", [])]
    paused = sum(1 for o in outcomes if o.human_answers)
    return {
        "paused_share": round(paused / len(outcomes), 3) if outcomes else None,
        "answered": sum(o.human_answers for o in outcomes),
        "approvals": sum(o.approvals for o in outcomes),
        "mean_wait_ms": round(sum(waits) / len(waits) * 1000, 1) if waits else None,
    }


def phase_percentiles(outcomes: Sequence[RunOutcome]) -> dict[str, dict[str, float | None]]:
    """p50/p95/p99 of each phase (`PHASE_ENDED_BY`) over every occurrence in the given runs."""
    pooled: dict[str, list[float]] = {}
    for outcome in outcomes:
        for phase, seconds in outcome.phases.items():
            pooled.setdefault(phase, []).extend(seconds)
    order = dict.fromkeys(PHASE_ENDED_BY.values())
    return {phase: percentiles_ms(pooled[phase]) for phase in order if phase in pooled}


async def _start_server(plan: RunsPlan, mock: Child, work_dir: Path) -> Child:
    # start_server_process creates data_dir with its parents, so work_dir exists before its log is opened
    server_plan = ServerPlan(
        profile_path=resolve_profile(plan.profile), provider_url=mock.url, data_dir=work_dir / "data"
    )
    return await start_server_process(server_plan, work_dir)


async def run_runs_bench(plan: RunsPlan, keep_dir: Path | None = None) -> dict[str, Any]:
    """Start the mock and the server, measure every point and the waiting point, stop both."""
    work_dir = keep_dir or Path(tempfile.mkdtemp(prefix="agentos-runs-"))
    repeats: list[list[dict[str, Any]]] = []
    try:
        mock = await start_mock_process(plan.mock, work_dir)
        try:
            await _check_contract(plan, work_dir / "contract")
            for repeat in range(2 if plan.campaign else 1):  # a campaign runs twice, on fresh servers
                repeats.append(await _points(plan, mock, work_dir / f"points-{repeat + 1}"))
            waiting = await _waiting(plan, mock, work_dir) if plan.waiting_runs else None
        finally:
            await stop_child(mock.process)
    finally:
        if keep_dir is None:
            shutil.rmtree(work_dir, ignore_errors=True)
    report = runs_report(plan, repeats[0], waiting)
    if plan.campaign:
        from agentos_bench.runs.campaigns import judge

        report |= {"campaign": plan.campaign, "ramp_s": plan.ramp_s, "repeats": repeats, "judged": judge(repeats)}
    return report


async def _check_contract(plan: RunsPlan, work_dir: Path) -> None:
    """Refuse a campaign against a mock that does not script the commands: one that "passed"
    without ever running the sandbox is the failure the reference documents warn about.

    The check walks a twin of the campaign's mock (the same scenario and answers, no pacing): the
    contract is the script, not the speed, and the heavy campaign's pace (300 tokens at 1.5 s
    each) would make the walk itself last over seven minutes."""
    from agentos.mock.check import check_tools_contract
    from agentos_bench.common.processes import BenchSetupError

    await asyncio.to_thread(work_dir.mkdir, parents=True, exist_ok=True)
    twin = await start_mock_process(replace(plan.mock, ttft_ms=0.0, tps=_UNPACED_TPS), work_dir)
    try:
        problems = await check_tools_contract(twin.url, plan.mock.scenario)
    finally:
        await stop_child(twin.process)
    if problems:
        raise BenchSetupError(f"the mock breaks the {plan.mock.scenario!r} contract: {'; '.join(problems)}")


async def _waiting(plan: RunsPlan, mock: Child, work_dir: Path) -> dict[str, Any]:
    server = await _start_server(plan, mock, work_dir / "waiting")
    try:
        row = await measure_waiting(plan, server)
    finally:
        await stop_child(server.process)
    print(f"runs: {row['waiting_human']} waiting, {row['per_waiting_run_kb']} KB each", file=sys.stderr, flush=True)
    return row


async def _points(plan: RunsPlan, mock: Child, work_dir: Path) -> list[dict[str, Any]]:
    server = await _start_server(plan, mock, work_dir)
    rows = []
    try:
        async with bench_http_session() as http:  # one throwaway run: one-time costs out of the first point
            await drive_run(http, RunTarget(server.url, agent=plan.agent), answer_delay_s=0.0, timeout_s=30.0)
        services = local_services(profile_settings(resolve_profile(plan.profile)))
        for n in plan.points:
            await asyncio.sleep(plan.settle_s)
            rows.append(await measure_point(plan, n, server, mock, services))
            print(f"runs: N={n}: {_progress(rows[-1])}", file=sys.stderr, flush=True)
    finally:
        await stop_child(server.process)
    return rows


def _progress(row: dict[str, Any]) -> str:
    return (
        f"{row['completed']}/{row['runs']} completed in {row['wall_s']} s, "
        f"duration p50 {row['duration_ms']['p50']} ms, "
        f"failures {row['failures'] or 0}"
    )


_TOPOLOGY = (
    "one machine, loopback only: mock-llm (one process); server (one process tree, sampled, "
    "with the sandbox fork server and its commands); the bench client (one process, one SSE connection per run)"
)


def runs_report(plan: RunsPlan, points: list[dict[str, Any]], waiting: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "schema": SCHEMA_VERSION,
        **report_head("runs", _TOPOLOGY, plan.command),
        "profile": plan.profile,
        "profiles": [plan.profile],
        "agent": plan.agent,
        "mock": asdict(plan.mock),
        "answer_delay_s": plan.answer_delay_s,
        "run_timeout_s": plan.run_timeout_s,
        "waiting_batches": plan.waiting_batches,
        "steps_counted_as": STEPS_COUNTED_AS,
        "points": points,
        "waiting": waiting,
    }
