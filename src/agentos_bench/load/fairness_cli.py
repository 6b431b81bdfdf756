"""`agentos bench fairness`: parse, run, write. No logic (that is `fairness.py`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from agentos_bench.common.cli import command_line, mock_settings
from agentos_bench.report.output import DEFAULT_OUT_DIR


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = commands.add_parser("fairness", help="tenant B's latency alone and beside tenant A flooding the server")
    p.add_argument("--users", type=int, default=8, help="tenant B's closed-loop users")
    p.add_argument("--ratio", type=int, default=10, help="tenant A runs ratio x B's users")
    p.add_argument("--concurrency-limit", type=int, default=64, help="the provider permits (binds)")
    p.add_argument("--reserves", default="0.1,0", help="kernel.fair_reserve per variant, comma-separated")
    p.add_argument("--fifo-src", type=Path, help="a src/ of the code before fair queuing: one more variant")
    p.add_argument("--profile", default="fairness")
    p.add_argument("--duration-secs", type=float, default=20.0)
    p.add_argument("--warmup-secs", type=float, default=3.0)
    p.add_argument("--mock-ttft-ms", type=float, default=2000.0)
    p.add_argument("--mock-tps", type=float, default=200.0)
    p.add_argument("--mock-tokens", type=int, default=8)
    p.add_argument("--keep-data", action="store_true")
    p.add_argument("--out-dir", type=Path, default=DEFAULT_OUT_DIR, help="bench/results to commit one")
    p.add_argument("--name", help="machine name in the file names (default: cores + CPU model)")
    p.set_defaults(handler=run_command)


def run_command(args: argparse.Namespace) -> int:
    from agentos.mock.loop import raise_fd_limit, run_loop
    from agentos_bench.load.fairness import FairnessPlan, run_fairness
    from agentos_bench.load.fairness_doc import write_fairness
    from agentos_bench.load.tenant_keys import AdminKeys

    raise_fd_limit()
    plan = FairnessPlan(
        users=args.users,
        ratio=args.ratio,
        concurrency_limit=args.concurrency_limit,
        reserves=tuple(float(r) for r in args.reserves.split(",") if r.strip()),
        profile=args.profile,
        fifo_src=args.fifo_src,
        warmup_s=args.warmup_secs,
        duration_s=args.duration_secs,
        mock=mock_settings(args),
        command=command_line(),
        keep_data=args.keep_data,
    )
    report = run_loop(run_fairness(plan, AdminKeys()))
    for path in write_fairness(report, args.out_dir, args.name):
        print(path)
    return 0
