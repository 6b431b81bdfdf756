"""`agentos bench runs --server-url URL[,URL...]`: concurrent agent runs against a deployment the
bench did not start.

The agent (`--agent`) is the deployment's own, with its own provider: the bench starts N runs per
point (over `--ramp-secs`), each on the next node in turn, follows each on its SSE stream,
answers every human request after the delay (an approval by quoting its `args_hash`), and times
it, as `agentos bench runs` does. What /proc gives for a server the bench started comes from each
node's `GET /metrics` once a second (`common.deployment`): CPU per node at 1 s, peak RSS; runs
per core are a point's runs over the peak of the nodes' summed cores (the database's and the
provider's CPU are not in it: they run elsewhere). No contract check of the provider, no waiting
point (both need processes of the bench's own).
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from pathlib import Path
from typing import Any

from agentos_bench.common.cpu import sample_cpu
from agentos_bench.common.deployment import Deployment, DeploymentReader, DeploymentSamples, cpu_samples_for
from agentos_bench.common.http import bench_http_session
from agentos_bench.report.document import _pcts, head_lines
from agentos_bench.report.machine import report_head
from agentos_bench.report.output import claim_stem, write_json
from agentos_bench.report.stats import cell, percentiles_ms
from agentos_bench.runs.bench import cpu_by_service, human_summary, peak_concurrency, phase_percentiles
from agentos_bench.runs.client import FAILURE_KINDS, RunOutcome, RunTarget, drive_run
from agentos_bench.runs.plan import RunsPlan


async def run_deployment_points(plan: RunsPlan, deployment: Deployment) -> dict[str, Any]:
    """Every point of `plan` against the deployment; the report (JSON-ready)."""
    rows = []
    async with bench_http_session({"Authorization": f"Bearer {deployment.admin_token}"}) as http:
        for n in plan.points:
            rows.append(await _point(plan, deployment, http, n))
    return {
        **report_head("runs-deployment", deployment.topology(), plan.command),
        "agent": plan.agent,
        "answer_delay_s": plan.answer_delay_s,
        "ramp_s": plan.ramp_s,
        "run_timeout_s": plan.run_timeout_s,
        "points": rows,
    }


async def _point(plan: RunsPlan, deployment: Deployment, http: Any, n: int) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    nodes = itertools.cycle(deployment.urls)
    targets = [RunTarget(next(nodes), agent=plan.agent, run_input=f"bench run {i}") for i in range(n)]
    samples, cpu, stop = DeploymentSamples(deployment.node_names), cpu_samples_for(deployment), asyncio.Event()
    started = loop.time()
    async with bench_http_session() as scraper, DeploymentReader(deployment, scraper, samples).opened() as reader:
        sampler = asyncio.create_task(sample_cpu(cpu, lambda: loop.time() - started, reader, stop))
        try:
            outcomes = await asyncio.gather(
                *(_drive(http, t, plan, i * plan.ramp_s / n) for i, t in enumerate(targets))
            )
        finally:
            stop.set()
            await sampler
    wall_s = loop.time() - started
    alive = peak_concurrency(plan.ramp_s, outcomes)
    return deployment_row(n, outcomes, wall_s) | cpu_by_service(cpu, alive) | _memory(samples)


async def _drive(http: Any, target: RunTarget, plan: RunsPlan, delay_s: float) -> RunOutcome:
    if delay_s > 0:  # its place in the ramp
        await asyncio.sleep(delay_s)
    return await drive_run(http, target, answer_delay_s=plan.answer_delay_s, timeout_s=plan.run_timeout_s)


def deployment_row(n: int, outcomes: list[RunOutcome], wall_s: float) -> dict[str, Any]:
    """One point from the runs' outcomes (pure)."""
    ok = [o for o in outcomes if o.ok]
    failures = Counter(o.failure for o in outcomes if o.failure)
    steps = sum(o.tool_results + o.human_answers for o in outcomes)
    return {
        "runs": n,
        "completed": len(ok),
        "failures": {kind: failures[kind] for kind in FAILURE_KINDS if failures[kind]},
        "start_ms": percentiles_ms([o.start_s for o in outcomes if o.start_s is not None]),
        "duration_ms": percentiles_ms([o.duration_s for o in ok if o.duration_s is not None]),
        "phase_ms": phase_percentiles(ok),
        "wall_s": round(wall_s, 2),
        "tool_results": sum(o.tool_results for o in outcomes),
        "steps_seen": steps,
        "human": human_summary(outcomes),
    }


def _memory(samples: DeploymentSamples) -> dict[str, Any]:
    peaks = {}
    for node, rows in samples.figures.items():
        rss = [r["rss_bytes"] for r in rows if r is not None and "rss_bytes" in r]
        peaks[node] = round(max(rss) / 2**20, 1) if rss else None
    return {"peak_rss_mb": peaks}


def deployment_markdown(report: dict[str, Any]) -> str:
    lines = [
        f"# Agent runs against a deployment ({report['created_utc'][:10]})",
        "",
        *head_lines(report),
        f"- **Runs:** agent `{report['agent']}`, ramp {report['ramp_s']} s, human answers after "
        f"{report['answer_delay_s']} s, run timeout {report['run_timeout_s']} s",
        "",
        "| N | completed | failures | start ms p50/p95/p99 (n) | run ms p50/p95/p99 (n) | wall s | requests answered "
        "(approvals) | peak cores per node | peak of the sum | runs alive at once | runs per core | peak RSS MB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in report["points"]:
        human = row["human"]
        nodes = ", ".join(f"{k} {cell(v)}" for k, v in row["cpu_peak_cores"].items() if k != "generator")
        rss = ", ".join(f"{k} {cell(v)}" for k, v in row["peak_rss_mb"].items())
        failures = ", ".join(f"{k}: {v}" for k, v in row["failures"].items()) or "0"
        peak, per_core = cell(row["cpu_peak_total_cores"]), cell(row["runs_per_core"])
        lines.append(
            f"| {row['runs']} | {row['completed']} | {failures} | {_pcts(row['start_ms'])} | "
            f"{_pcts(row['duration_ms'])} | {row['wall_s']} | {human['answered']} ({human['approvals']}) | "
            f"{nodes} | {peak} | {row['peak_concurrent_runs']} | {per_core} | {rss} |"
        )
    lines += [
        "",
        "Cores: each node's `process_cpu_seconds_total` (GET /metrics) over 1 s intervals; runs per "
        "core: runs alive at once over the peak of the nodes' sum (no database, provider, client).",
    ]
    return "\n".join(lines) + "\n"


def write_deployment_report(report: dict[str, Any], out_dir: Path, stem: str) -> list[Path]:
    stem = claim_stem(out_dir, stem)
    json_path, md_path = out_dir / f"{stem}.json", out_dir / f"{stem}.md"
    write_json(json_path, report)
    md_path.write_text(deployment_markdown(report))
    return [json_path, md_path]
