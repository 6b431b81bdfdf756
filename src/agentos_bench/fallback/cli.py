"""`agentos bench fallback`: parse, run, write the report, print the verdict.

    agentos bench fallback --out-dir bench/results            # 1000 users, 90 s, the primary failing 30-60 s
    python -m agentos_bench.fallback --users 20 --seconds 6 --fault-at 2 --fault-for 2 --mock-ttft-ms 50

Heavy imports happen in the handler, so registering the command costs the CLI nothing.
"""

from __future__ import annotations

import argparse

from agentos_bench.common.cli import BenchCommand, add_output_arguments, command_line, in_work_dir, print_outcome

_NUMBERS: tuple[tuple[str, type, float, str | None], ...] = (  # flag, type, default, help
    ("--users", int, 1000, "concurrent closed-loop users (default 1000)"),
    ("--seconds", float, 90.0, "the measured window (default 90)"),
    ("--fault-at", float, 30.0, "the primary starts failing, s into the window (default 30)"),
    ("--fault-for", float, 30.0, "... for this long (default 30)"),
    ("--warmup-secs", float, 3.0, None),
    ("--turn-timeout-secs", float, 60.0, None),
    ("--mock-ttft-ms", float, 2000.0, "both mocks (default: the sweep's, 2000 ms, 200 tokens/s, 8 tokens)"),
    ("--mock-tps", float, 200.0, None),
    ("--mock-tokens", int, 8, None),
    ("--breaker-failures", int, 5, "[routing] breaker_failures (default 5)"),
    ("--breaker-cooldown-s", float, 5.0, "[routing] breaker_cooldown_s (default 5)"),
    ("--breaker-probes", int, 1, "[routing] breaker_probes (default 1)"),
    ("--poll-ms", float, 50.0, "how often the server's /metrics is read (default 50)"),
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    for flag, kind, default, text in _NUMBERS:
        p.add_argument(flag, type=kind, default=kind(default), help=text)
    p.add_argument("--profile", default="full-store", help="the server's profile: kernel limits, store")
    p.add_argument("--no-control", action="store_true", help="skip the control run (the same campaign, no fault)")
    p.add_argument("--note", action="append", default=[], help="a line for the report (e.g. a busy machine)")
    add_output_arguments(p)


def run_command(args: argparse.Namespace, command: str | None = None) -> int:
    from agentos.mock.loop import raise_fd_limit, run_loop
    from agentos_bench.common.cli import mock_settings, report_stem
    from agentos_bench.fallback.bench import run_fallback
    from agentos_bench.fallback.plan import FallbackPlan
    from agentos_bench.fallback.report import write_fallback_report
    from agentos_bench.report.machine import report_head

    plan = FallbackPlan(
        users=args.users,
        seconds=args.seconds,
        fault_at_s=args.fault_at,
        fault_for_s=args.fault_for,
        warmup_s=args.warmup_secs,
        turn_timeout_s=args.turn_timeout_secs,
        mock=mock_settings(args),
        breaker_failures=args.breaker_failures,
        breaker_cooldown_s=args.breaker_cooldown_s,
        breaker_probes=args.breaker_probes,
        poll_s=args.poll_ms / 1000,
        profile=args.profile,
        control=not args.no_control,
        notes=tuple(args.note),
    )
    if problems := plan.problems():
        raise SystemExit(f"agentos bench fallback: {'; '.join(problems)}")
    command = command_line(command)
    raise_fd_limit()
    result = in_work_dir(args.keep_dir, "agentos-fallback-", lambda work: run_loop(run_fallback(plan, work)))
    topology = (
        "one machine, loopback only: one server (`agentos serve`) routing model `m` over two targets in order, "
        "each a mock provider process (`agentos mock-llm`: primary, secondary), fresh for each run; the users "
        "and the /metrics poller in this process"
    )
    report = {**report_head("fallback", topology, command), **result}
    print_outcome(write_fallback_report(report, args.out_dir, report_stem("fallback", args.name)), report["verdict"])
    return 0


HELP = "the provider router's fault campaign: the primary target failing mid-load, turns falling back (issue 27)"
COMMAND = BenchCommand("fallback", HELP, "agentos_bench.fallback", __doc__, add_arguments, run_command)
main = COMMAND.main
