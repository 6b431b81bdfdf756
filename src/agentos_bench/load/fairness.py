"""`agentos bench fairness`: does a tenant flooding the server slow another tenant down?

Usage::

    report = await run_fairness(FairnessPlan(users=8, ratio=10), AdminKeys())

Scenario (issue 8, "fair share of the provider"): the provider limit binds
(`kernel.concurrency_limit`, 64 by default, below the offered load). Tenant B runs `users`
closed-loop users alone, then again while tenant A runs `ratio` times as many; both points are
measured by the same server process, one after the other, so the ratio of B's TTFT p95 (with A /
alone) compares like with like. The target: at most 1.10.

Each variant is a fresh server with its own settings: the fair-share reserve on
(`kernel.fair_reserve`, default 0.1) and off (0: weighted fair queuing alone). A and B are real
tenants with their own API keys, made through the admin API (`AdminKeys`) on each new server.
Optionally (`fifo_src`) the code from before fair queuing serves the same load with no keys, as
one tenant: one FIFO line, the contrast of what tenants had before.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from agentos.mock.server import MockSettings
from agentos_bench.common.http import bench_http_session
from agentos_bench.common.mock_process import start_mock_process
from agentos_bench.common.processes import ServerPlan, resolve_profile, start_server_process, stop_child
from agentos_bench.load.loadgen import Group, PointPlan, Probes, run_groups
from agentos_bench.load.sweep_plan import BENCH_MOCK
from agentos_bench.load.targets import ServerTarget
from agentos_bench.load.tenant_keys import AdminKeys
from agentos_bench.report.document import SCHEMA_VERSION
from agentos_bench.report.machine import report_head

TARGET_RATIO = 1.10  # B's TTFT p95 with A flooding / alone


@dataclass(frozen=True, kw_only=True)
class FairnessPlan:
    users: int = 8  # tenant B's closed-loop users
    ratio: int = 10  # tenant A runs ratio x users
    concurrency_limit: int = 64
    reserves: Sequence[float] = (0.1, 0.0)
    profile: str = "fairness"
    fifo_src: Path | None = None  # a `src` directory of the code before fair queuing
    warmup_s: float = 3.0
    duration_s: float = 20.0
    turn_timeout_s: float = 60.0
    mock: MockSettings = BENCH_MOCK
    command: str = ""
    keep_data: bool = False


@dataclass(frozen=True, kw_only=True)
class Variant:
    name: str
    env: dict[str, str] = field(default_factory=dict)
    keyed: bool = True  # A and B are tenants with keys; False: one tenant, no keys


def variants(plan: FairnessPlan) -> list[Variant]:
    limit = {"AGENTOS_KERNEL_CONCURRENCY_LIMIT": str(plan.concurrency_limit)}
    found = [
        Variant(name=f"fair_reserve={r:g}", env={**limit, "AGENTOS_KERNEL_FAIR_RESERVE": str(r)}) for r in plan.reserves
    ]
    if plan.fifo_src is not None:
        found.append(Variant(name="fifo (before)", env={**limit, "PYTHONPATH": str(plan.fifo_src)}, keyed=False))
    return found


async def run_fairness(plan: FairnessPlan, keys: AdminKeys) -> dict[str, Any]:
    """Run every variant (a server each) and return the report (not yet written)."""
    work_dir = Path(tempfile.mkdtemp(prefix="agentos-fairness-"))
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    try:
        mock = await start_mock_process(plan.mock, work_dir)
        try:
            async with bench_http_session() as http:
                for index, variant in enumerate(variants(plan)):
                    data_dir = work_dir / f"data-{index}"
                    rows += await _variant_rows(plan, variant, http, mock.url, keys, data_dir)
        finally:
            await stop_child(mock.process)
    finally:
        if not plan.keep_data:
            shutil.rmtree(work_dir, ignore_errors=True)
    return fairness_report(plan, rows, notes)


async def _variant_rows(
    plan: FairnessPlan,
    variant: Variant,
    http: aiohttp.ClientSession,
    mock_url: str,
    keys: AdminKeys,
    data_dir: Path,
) -> list[dict[str, Any]]:
    env = {**variant.env, **keys.env} if variant.keyed else variant.env
    server_plan = ServerPlan(
        profile_path=resolve_profile(plan.profile), provider_url=mock_url, data_dir=data_dir, env=env
    )
    child = await start_server_process(server_plan, data_dir.parent)
    _log(f"server ({variant.name}) pid {child.pid} at {child.url}")
    try:
        made = {t: await keys(http, child.url, t) for t in ("A", "B")} if variant.keyed else {}
        b = Group(ServerTarget(child.url, api_key=made.get("B"), name="B"), plan.users)
        a = Group(ServerTarget(child.url, api_key=made.get("A"), name="A"), plan.users * plan.ratio)
        point = PointPlan(
            concurrency=0, warmup_s=plan.warmup_s, duration_s=plan.duration_s, turn_timeout_s=plan.turn_timeout_s
        )
        probes = Probes(server_pid=child.pid)
        rows = []
        for phase, groups in (("B alone", [b]), ("B with A", [b, a])):
            for result in await run_groups(groups, http, point, probes):
                rows.append({"variant": variant.name, "phase": phase, "tenant": result.target, **result.as_row()})
                _log(_progress(rows[-1]))
        return rows
    finally:
        await stop_child(child.process)


def _log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _progress(row: dict[str, Any]) -> str:
    return (
        f"{row['variant']:<18} {row['phase']:<9} {row['tenant']} users={row['concurrency']:<4} "
        f"{row['turns_per_s']:>7} turns/s  ttft p50 {row['ttft_ms']['p50']} p95 {row['ttft_ms']['p95']} ms  "
        f"failures {row['failures_total']}"
    )


def summarize(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per variant: B's TTFT p95 alone and with A, their ratio, and whether it meets the target."""
    out = []
    for variant in dict.fromkeys(r["variant"] for r in rows):
        b = {r["phase"]: r for r in rows if r["variant"] == variant and r["tenant"] == "B"}
        alone, shared = (b.get(p, {}).get("ttft_ms", {}).get("p95") for p in ("B alone", "B with A"))
        ratio = round(shared / alone, 3) if alone and shared else None
        out.append(
            {
                "variant": variant,
                "b_ttft_p95_alone_ms": alone,
                "b_ttft_p95_with_a_ms": shared,
                "ratio": ratio,
                "meets_target": ratio is not None and ratio <= TARGET_RATIO,
            }
        )
    return out


_TOPOLOGY = "one machine, loopback only: mock-llm, one server per variant, the load generator"


def fairness_report(plan: FairnessPlan, rows: list[dict[str, Any]], notes: list[str]) -> dict[str, Any]:
    return {
        "schema": SCHEMA_VERSION,
        **report_head("fairness", _TOPOLOGY, plan.command),
        "plan": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(plan).items() if k != "mock"},
        "mock": asdict(plan.mock),
        "target_ratio": TARGET_RATIO,
        "summary": summarize(rows),
        "rows": rows,
        "notes": notes,
    }
