"""`agentos bench overload`: parse arguments, run, write the report. Also runnable alone::

    python -m agentos_bench.overload --probes 500

The method is in `agentos_bench.overload.bench` (the package docstring has the theory). Heavy
imports happen in the handler, so registering the command costs the CLI nothing.
"""

from __future__ import annotations

import argparse
import sys

from agentos_bench.common.cli import BenchCommand, add_output_arguments, add_plan_arguments, command_line, in_work_dir


def add_arguments(p: argparse.ArgumentParser) -> None:
    from agentos_bench.overload.plan import OverloadPlan

    add_plan_arguments(
        p,
        OverloadPlan(),
        max_in_flight="the server's max_in_flight_turns",
        offered="load workers posting turns at once",
        ttft_ms="the mock's time to first token",
        tokens="tokens per answer",
        tps="the mock's tokens per second",
        retry_pause_ms="a refused worker's pause",
        probes="fresh-connection turn probes (and /healthz ones)",
        probe_interval_ms=None,
        warmup_s="load alone before the probes",
    )
    add_output_arguments(p)
    p.add_argument("--label", help="a word in the file names (before, after, ...)")


def run_command(args: argparse.Namespace, command: str | None = None) -> int:
    """Run the bench, write the report, print the files written; exit 1 unless every answer was as it must be."""
    from agentos.mock.loop import raise_fd_limit
    from agentos_bench.common.cli import plan_from_args, print_report, report_stem
    from agentos_bench.overload.bench import run_overload
    from agentos_bench.overload.plan import OverloadPlan
    from agentos_bench.overload.report import write_overload_report

    if min(args.max_in_flight, args.offered, args.probes, args.tokens) < 1 or args.offered <= args.max_in_flight:
        raise SystemExit("agentos bench overload: sizes must be >= 1 and --offered above --max-in-flight")
    raise_fd_limit()
    plan = plan_from_args(OverloadPlan, args, command=command_line(command))
    if plan.turn_s <= plan.warmup_s + plan.window_s:
        print(
            f"warning: a turn ({plan.turn_s:g} s) ends before the probes do ({plan.warmup_s + plan.window_s:g} s): "
            "a probe may find a free slot and be admitted",
            file=sys.stderr,
        )
    elif plan.ttft_ms / 1000 <= plan.warmup_s + plan.window_s:
        print("note: the admitted turns stream during the probe window; its CPU figure includes that", file=sys.stderr)
    report = in_work_dir(args.keep_dir, "agentos-overload-", lambda work: run_overload(plan, work))
    stem = report_stem(f"{args.label}-overload" if args.label else "overload", args.name)
    s = report["summary"]
    refused, floor = s["refused_429_ms"], s["healthz_ms"]
    print_report(
        write_overload_report(report, args.out_dir, stem),
        f"429 on a fresh connection: p50 {refused['p50']} ms, p99 {refused['p99']} ms "
        f"(/healthz p50 {floor['p50']} ms, p99 {floor['p99']} ms); valid: {s['valid']}",
    )
    return 0 if s["valid"] else 1


HELP = "429 latency on fresh connections with the server 3x over its gate"
COMMAND = BenchCommand("overload", HELP, "agentos_bench.overload", __doc__, add_arguments, run_command)
main = COMMAND.main
