"""`agentos bench faults --cluster`: the campaign's flags, the plan they make, and its report.

agentos bench faults --cluster                       # 3 nodes, 300 users, 100 runs, the five faults
agentos bench faults --cluster --scale 0.05          # a toy run (the test's): every size and time x 0.05
agentos bench faults --cluster --faults kill,redis-stop --users 500
"""

from __future__ import annotations

import argparse
from typing import Any

FAULT_NAMES = ("kill", "postgres-restart", "redis-stop", "node-cut", "clock-step")  # agentos_bench.chaos.faults.FAULTS


def add_cluster_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("--cluster (the cluster chaos campaign, issue #26)")
    g.add_argument("--cluster", action="store_true", help="the cluster chaos campaign instead of the three parts")
    g.add_argument(
        "--faults", default=",".join(FAULT_NAMES), help=f"comma-separated, in order ({', '.join(FAULT_NAMES)})"
    )
    g.add_argument("--nodes", type=int, default=3)
    g.add_argument("--users", type=int, default=300, help="concurrent chat users (before --scale)")
    g.add_argument("--runs", type=int, default=100, help="concurrent agent runs (before --scale)")
    g.add_argument("--provider-limit", type=int, default=300, help="kernel.concurrency_limit (before --scale)")
    g.add_argument("--ttft-ms", type=float, default=4000.0, help="the mock's first-token time (before --scale)")
    g.add_argument("--hold-s", type=float, default=30.0, help="node down, cut or clock-stepped this long")
    g.add_argument("--redis-down-s", type=float, default=30.0)
    g.add_argument("--pg-down-s", type=float, default=5.0)
    g.add_argument("--clock-step-s", type=float, default=3600.0)
    g.add_argument("--note", action="append", default=[], help="a line for the report's notes (e.g. a shared machine)")


def cluster_plan(args: argparse.Namespace) -> Any:
    """The `ChaosPlan` the flags ask for; sizes and times x `--scale` (the leases with them, so a
    toy run still sees a takeover within its short hold).

    Raises:
        SystemExit: a flag out of range, or an unknown fault.
    """
    from agentos_bench.chaos.bench import ChaosPlan
    from agentos_bench.chaos.faults import FaultTimes

    faults = tuple(f.strip() for f in args.faults.split(",") if f.strip())
    if not faults or set(faults) - set(FAULT_NAMES) or args.nodes < 2 or args.scale <= 0:
        raise SystemExit(
            f"agentos bench faults --cluster: --faults from {', '.join(FAULT_NAMES)}; --nodes >= 2; --scale > 0"
        )
    s = args.scale
    lease = max(2.0, 15.0 * s)
    # The permit lease stays >= 4 s: after a Redis restart the hold-off on grants (a third of it
    # + 0.5 s) must outlast a node's second of deciding alone, or that node's streams are not yet
    # back in Redis when grants resume (docs/deployment.md, the cluster under faults: known limits).
    times = FaultTimes(
        hold_s=max(1.5 * lease + 1, args.hold_s * s),
        pg_down_s=max(0.5, args.pg_down_s * s),
        redis_down_s=max(1.0, args.redis_down_s * s),
        clock_step_s=args.clock_step_s,
    )
    return ChaosPlan(
        nodes=args.nodes,
        users=max(args.nodes, round(args.users * s)),
        runs=max(2, round(args.runs * s)),
        faults=faults,
        provider_limit=max(4, round(args.provider_limit * s)),
        ttft_ms=max(200.0, args.ttft_ms * s),
        warmup_s=max(2.0, 20.0 * s),
        settle_s=max(2.0, 20.0 * s),
        drain_s=max(15.0, 120.0 * s),
        run_lease_s=lease,
        permit_lease_s=max(4.0, 10.0 * s),
        times=times,
    )


def run_cluster(args: argparse.Namespace, command: str) -> int:
    from agentos.mock.loop import raise_fd_limit, run_loop
    from agentos_bench.chaos.bench import run_chaos
    from agentos_bench.chaos.report import write_chaos_report
    from agentos_bench.common.cli import in_work_dir, report_stem
    from agentos_bench.report.machine import report_head

    plan = cluster_plan(args)
    raise_fd_limit()
    result = in_work_dir(args.keep_dir, "agentos-chaos-", lambda work: run_loop(run_chaos(plan, work)))
    topology = (
        f"one machine, loopback only: {plan.nodes} nodes (`agentos serve`) on the campaign's own PostgreSQL 15 and "
        "Redis (started for it, stopped after), the last node through TCP proxies to both; one mock provider "
        "(`agentos mock-llm`, the tools scenario); the clients and the proxies in this process"
    )
    report = {**report_head("faults-cluster", topology, command), **result}
    report["notes"] = [*args.note, *report.get("notes", [])]
    for path in write_chaos_report(report, args.out_dir, report_stem("faults-cluster", args.name)):
        print(path)
    for fault, reason in report.get("skipped", {}).items():
        print(f"skipped: {fault} ({reason})")
    for fault, verdicts in report["verdict"].items():
        for target, v in verdicts.items():
            print(f"{fault}: {'met' if v['met'] else 'NOT MET'}: {target} ({v['value']})")
    return 0
