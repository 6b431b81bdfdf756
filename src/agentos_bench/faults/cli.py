"""`agentos bench faults`: parse, run, write the report, print the verdict.

    python -m agentos_bench.faults --scale 0.05
    python -m agentos_bench.faults --cluster --scale 0.05   # the cluster chaos campaign (agentos_bench.chaos)

Heavy imports happen in the handler, so registering the command costs the CLI nothing.
"""

from __future__ import annotations

import argparse

from agentos_bench.chaos.command import add_cluster_arguments
from agentos_bench.common.cli import BenchCommand, add_output_arguments, command_line, in_work_dir, print_outcome
from agentos_bench.faults.parts import PARTS


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--parts", default=",".join(PARTS), help=f"which parts, comma-separated ({', '.join(PARTS)})")
    p.add_argument("--scale", type=float, default=1.0, help="kills, users and seconds x this (at least 1 kill)")
    p.add_argument("--kills", type=int, default=20)
    p.add_argument("--seed", type=int, default=1, help="the moments of the kills")
    add_output_arguments(p)
    add_cluster_arguments(p)


def run_command(args: argparse.Namespace, command: str | None = None) -> int:
    if args.cluster:
        from agentos_bench.chaos.command import run_cluster

        return run_cluster(args, command_line(command))
    from agentos.mock.loop import raise_fd_limit, run_loop
    from agentos_bench.common.cli import report_stem
    from agentos_bench.faults.bench import FaultsPlan, run_faults
    from agentos_bench.faults.provider import OverloadPlan, ProviderFaultPlan
    from agentos_bench.faults.report import write_faults_report
    from agentos_bench.faults.storm import StormPlan
    from agentos_bench.report.machine import report_head

    parts = tuple(part.strip() for part in args.parts.split(",") if part.strip())
    if not parts or set(parts) - set(PARTS) or args.scale <= 0 or args.kills < 1:
        raise SystemExit(f"agentos bench faults: --parts from {', '.join(PARTS)}; --scale > 0; --kills >= 1")
    command = command_line(command)
    scale = args.scale
    plan = FaultsPlan(
        parts=parts,
        storm=StormPlan(
            kills=max(1, round(args.kills * scale)),
            users=max(2, round(50 * scale)),
            automations=max(1, round(10 * scale)),
            seed=args.seed,
            gap_s=(1.0, 3.0) if scale >= 0.5 else (0.5, 1.0),
            settle_s=2.0 if scale >= 0.5 else 0.5,
        ),
        provider=ProviderFaultPlan(users=max(2, round(20 * scale)), seconds=max(2.0, 30 * scale)),
        overload=OverloadPlan(
            limit=max(4, round(50 * scale)), seconds=max(3.0, 20 * scale), probes=max(20, round(200 * scale))
        ),
        command=command,
    )
    raise_fd_limit()
    result = in_work_dir(args.keep_dir, "agentos-faults-", lambda work: run_loop(run_faults(plan, work)))
    topology = (
        "one machine, loopback only: the server (`agentos serve`, SQLite), the mock provider "
        "(`agentos mock-llm`), each part with fresh ones; the clients in this process"
    )
    report = {
        **report_head("faults", topology, command),
        **result,
    }
    print_outcome(write_faults_report(report, args.out_dir, report_stem("faults", args.name)), report["verdict"])
    return 0


HELP = "crash storm (kill -9), provider faults, overload at 3x: the targets; --cluster: the cluster chaos campaign"
COMMAND = BenchCommand("faults", HELP, "agentos_bench.faults", __doc__, add_arguments, run_command)
main = COMMAND.main
