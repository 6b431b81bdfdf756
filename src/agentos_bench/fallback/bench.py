"""The campaign's runs: two mock processes (primary, secondary), one server routing model `m`
over them, `users` closed-loop users (the load generator's), the fault switched on the primary
by `POST /faults` at `fault_at_s` and off at `fault_off_s`, the server's /metrics read every
`poll_s`. Every process is a child bound to 127.0.0.1, stopped by its pid.

`run_fallback` runs the control first (the same campaign, no fault: the noise floor of the same
sitting), then the fault run, and judges the fault run.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

import aiohttp

from agentos_bench.common.http import bench_http_session
from agentos_bench.common.mock_process import start_mock_process
from agentos_bench.common.processes import Child, ServerPlan, resolve_profile, start_server_process, stop_child
from agentos_bench.common.procfs import sample_tree
from agentos_bench.fallback.findings import (
    Phase,
    breaker_moments,
    failed_turns,
    p95_difference,
    phase_table,
    target_totals,
    verdict,
)
from agentos_bench.fallback.metrics import Poller, scrape
from agentos_bench.fallback.plan import PRIMARY, SECONDARY, FallbackPlan, server_config
from agentos_bench.load.loadgen import PointPlan, Probes, run_point
from agentos_bench.load.targets import ServerTarget
from agentos_bench.report.stats import ratio


async def run_fallback(plan: FallbackPlan, work_dir: Path) -> dict[str, Any]:
    result: dict[str, Any] = {"plan": _plan_row(plan), "loadavg_start": _loadavg()}
    if plan.control:
        result["control"] = await run_campaign(plan, work_dir / "control", fault=False)
    result["fault"] = await run_campaign(plan, work_dir / "fault", fault=True)
    result["loadavg_end"] = _loadavg()
    fault = result["fault"]
    if control := result.get("control"):
        fault["against_control"] = _against(fault, control)
    result["verdict"] = verdict(fault)
    return result


async def run_campaign(plan: FallbackPlan, work_dir: Path, *, fault: bool) -> dict[str, Any]:
    primary = await start_mock_process(plan.mock, _log_dir(work_dir, "primary"))
    try:
        secondary = await start_mock_process(plan.mock, _log_dir(work_dir, "secondary"))
        try:
            config = _write_config(
                work_dir, server_config(plan, resolve_profile(plan.profile), primary.url, secondary.url)
            )
            server_plan = ServerPlan(profile_path=config, provider_url="", data_dir=work_dir / "data")
            server = await start_server_process(server_plan, work_dir)
            try:
                return await _measure(plan, server, primary, secondary, fault)
            finally:
                await stop_child(server.process)
        finally:
            await stop_child(secondary.process)
    finally:
        await stop_child(primary.process)


def _log_dir(work_dir: Path, name: str) -> Path:
    """Each mock's log (`mock-llm.log`) in a folder of its own."""
    path = work_dir / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def _write_config(work_dir: Path, text: str) -> Path:
    path = work_dir / "server.toml"
    path.write_text(text)
    return path


async def _measure(plan: FallbackPlan, server: Child, primary: Child, secondary: Child, fault: bool) -> dict[str, Any]:
    mocks = {"primary": primary, "secondary": secondary}
    async with bench_http_session() as http:
        for mock in mocks.values():
            await _mock_json(http, mock, "POST", "/stats/reset")
        poller = Poller(http, server.url, plan.poll_s)
        events: dict[str, float] = {}
        tasks: list[asyncio.Task[None]] = []
        cpu_start: dict[str, float] = {}

        def on_window(start: float, _end: float) -> None:
            events["window_start"] = start
            cpu_start.update({name: sample_tree(m.pid, memory=False).cpu_s for name, m in mocks.items()})
            tasks.append(asyncio.create_task(poller.run()))
            if fault:
                tasks.append(asyncio.create_task(_switch_faults(http, primary, plan, start, events)))

        first = await scrape(http, server.url, buckets=True)
        point = await run_point(
            ServerTarget(server.url),
            http,
            PointPlan(
                concurrency=plan.users,
                warmup_s=plan.warmup_s,
                duration_s=plan.seconds,
                turn_timeout_s=plan.turn_timeout_s,
            ),
            Probes(server_pid=server.pid),
            on_window,
        )
        poller.stop.set()
        await asyncio.gather(*tasks)
        last = await scrape(http, server.url, buckets=True)
        mock_cpu = {
            n: round(sample_tree(m.pid, memory=False).cpu_s - cpu_start.get(n, 0.0), 2) for n, m in mocks.items()
        }
        mock_stats = {name: await _mock_json(http, mock, "GET", "/stats") for name, mock in mocks.items()}
    origin = events["window_start"]
    samples = [*point.samples, *point.outside]
    fault_on = events.get("fault_on", origin + plan.fault_at_s) - origin
    fault_off = events.get("fault_off", origin + plan.fault_off_s) - origin
    breaker = breaker_moments(poller.scrapes, origin, PRIMARY, fault_on, fault_off)
    table = phase_table(samples, origin, _phases(plan, fault, fault_on, fault_off, breaker.get("opened_after_s")))
    during = "open" if fault else "during"
    return {
        "fault": fault,
        "primary": PRIMARY,
        "secondary": SECONDARY,
        "fault_on_s": round(fault_on, 3),
        "fault_off_s": round(fault_off, 3),
        "fault_switch_ms": {k: round(v * 1000, 1) for k, v in events.items() if k.endswith("_took")},
        "failed_turns": failed_turns(samples),
        "phases": table,
        "ttft_p95_added_ms": p95_difference(table, during),
        "breaker": breaker
        | {"poll_ms": round(plan.poll_s * 1000, 1), "poll_failures": poller.failed, "poll_gap_ms": _gaps(poller)},
        "targets": target_totals(first, last),
        "mock_calls": {name: _calls(stats) for name, stats in mock_stats.items()},
        "mock_cpu_s": mock_cpu,
        "server": point.server,
        "loadgen_cpu_cores": point.loadgen_cpu_cores,
    }


def _phases(plan: FallbackPlan, fault: bool, on: float, off: float, opened_after: float | None) -> list[Phase]:
    before, after = Phase("before", 0.0, on), Phase("after", off, plan.seconds)
    if not fault:
        return [before, Phase("during", on, off), after]
    if opened_after is None:  # never seen open: no "open" phase to judge
        return [before, Phase("opening", on, off), after]
    opened = min(on + opened_after, off)
    return [before, Phase("opening", on, opened), Phase("open", opened, off), after]


async def _switch_faults(
    http: aiohttp.ClientSession, primary: Child, plan: FallbackPlan, origin: float, events: dict[str, float]
) -> None:
    """`error_rate` 1.0 on the primary at `fault_at_s`, 0.0 at `fault_off_s` (loop time from `origin`);
    the moment each request was sent is the fault's moment (what the breaker is timed from)."""
    loop = asyncio.get_running_loop()
    for name, at_s, rate in (("fault_on", plan.fault_at_s, 1.0), ("fault_off", plan.fault_off_s, 0.0)):
        await asyncio.sleep(max(0.0, origin + at_s - loop.time()))
        events[name] = loop.time()
        await _mock_json(http, primary, "POST", "/faults", {"error_rate": rate})
        events[f"{name}_took"] = loop.time() - events[name]


async def _mock_json(
    http: aiohttp.ClientSession, mock: Child, method: str, path: str, body: dict[str, float] | None = None
) -> dict[str, Any]:
    """Raises: aiohttp.ClientResponseError: the mock refused (a campaign without its fault is no campaign)."""
    base = mock.url.removesuffix("/v1")
    async with http.request(method, f"{base}{path}", json=body, timeout=aiohttp.ClientTimeout(total=10)) as response:
        response.raise_for_status()
        answer: dict[str, Any] = await response.json()
        return answer


def _calls(stats: dict[str, Any]) -> dict[str, Any]:
    keys = ("requests", "completed", "errors_injected", "aborted", "max_concurrent")
    return {key: stats.get(key) for key in keys}


def _gaps(poller: Poller) -> dict[str, float | None]:
    """The time between consecutive scrapes' answers: the real granularity of the breaker's timing."""
    got = [s.received for s in poller.scrapes]
    gaps = sorted(b - a for a, b in zip(got, got[1:], strict=False))
    if not gaps:
        return {"p50": None, "max": None}
    return {"p50": round(gaps[len(gaps) // 2] * 1000, 1), "max": round(gaps[-1] * 1000, 1)}


def _against(fault: dict[str, Any], control: dict[str, Any]) -> dict[str, Any]:
    """The fault run beside the control of the same sitting: the control's own p95 difference
    over the fault's place (the noise floor of "added"), and the ratios of the open phase to it."""
    open_, during = fault["phases"].get("open", {}), control["phases"]["during"]
    p95 = ratio(open_.get("ttft_ms", {}).get("p95"), during["ttft_ms"].get("p95"))
    rate = ratio(open_.get("turns_per_s"), during.get("turns_per_s"))
    return {
        "control_ttft_p95_difference_ms": control["ttft_p95_added_ms"],
        "open_ttft_p95_over_control": None if p95 is None else round(p95, 4),
        "open_turns_per_s_over_control": None if rate is None else round(rate, 4),
    }


def _plan_row(plan: FallbackPlan) -> dict[str, Any]:
    row = asdict(plan)
    row["notes"] = list(plan.notes)
    return row


def _loadavg() -> list[float]:
    return [round(v, 2) for v in os.getloadavg()]
