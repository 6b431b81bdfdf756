"""`agentos bench runs`: concurrent agent runs with human answers. Parse arguments, run, write the report.

Registered from `cli_bench.register` through `register(commands)`; also runnable alone::

    python -m agentos_bench.runs --runs 100,1000 --answer-delay-secs 1

The method is in `agentos_bench.runs.bench`. Heavy imports happen in the handler, so registering
the command costs the CLI nothing.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from agentos_bench.common.cli import BenchCommand, add_output_arguments, command_line, mock_settings, print_report


def add_arguments(p: argparse.ArgumentParser) -> None:

    p.add_argument(
        "--campaign",
        choices=["light", "heavy", "hitl"],
        help="a run campaign (docs/benchmarking.md): sets the points, ramp, mock, profile and answer delay",
    )
    p.add_argument("--scale", type=float, default=1.0, help="with --campaign: counts, ramp, delay and tokens x this")
    p.add_argument("--runs", default="100,1000", help="concurrent runs per point, comma-separated")
    delay_help = "the human answers (and approves) this long after each request (default 1; a campaign's own)"
    p.add_argument("--answer-delay-secs", type=float, help=delay_help)
    p.add_argument("--run-timeout-secs", type=float, default=120.0, help="per run; it is terminated after")
    p.add_argument("--waiting-runs", type=int, default=1000, help="runs parked on a human for memory (0: skip)")
    p.add_argument("--waiting-batches", type=int, default=4, help="start the waiting runs in this many bursts")
    p.add_argument("--waiting-timeout-secs", type=float, default=120.0)
    p.add_argument("--settle-secs", type=float, default=1.0)
    p.add_argument("--profile", default="runs", help="a profile name (packaged) or a path to a TOML file")
    p.add_argument("--agent", default="bench", help="the profile's agent to run")
    p.add_argument("--mock-ttft-ms", type=float, default=200.0)
    p.add_argument("--mock-tps", type=float, default=200.0)
    p.add_argument("--mock-tokens", type=int, default=8)
    deployment = p.add_argument_group("a deployment already running (its agent and provider; no waiting point)")
    deployment.add_argument("--server-url", help="URL[,URL...]: its nodes, each run on the next one in turn")
    token_help = "the environment variable holding an admin key (never given on the command line)"
    deployment.add_argument("--admin-token-env", default="AGENTOS_API_TOKEN", help=token_help)
    deployment.add_argument("--ramp-secs", type=float, default=0.0, help="a point's runs start evenly over this long")
    add_output_arguments(p)


def _points(text: str) -> tuple[int, ...]:
    points = tuple(int(p) for p in text.split(",") if p.strip())
    if not points or min(points) < 1:
        raise SystemExit(f"agentos bench runs: --runs needs positive counts, got {text!r}")
    return points


def run_command(args: argparse.Namespace, command: str | None = None) -> int:
    """Run the bench and write the report; print the files written."""
    from agentos.mock.loop import raise_fd_limit, run_loop
    from agentos_bench.report.machine import machine_info, result_stem, utc_now
    from agentos_bench.runs.bench import run_runs_bench
    from agentos_bench.runs.plan import RunsPlan
    from agentos_bench.runs.report import write_runs_report

    fd_limit = raise_fd_limit()  # 1000 SSE connections here, inherited by the server and the mock
    command = command_line(command)
    if args.server_url is not None:
        return _deployment(args, command)
    if args.campaign:
        return _campaign(args, command, fd_limit)
    plan = RunsPlan(
        points=_points(args.runs),
        answer_delay_s=1.0 if args.answer_delay_secs is None else args.answer_delay_secs,
        run_timeout_s=args.run_timeout_secs,
        waiting_runs=args.waiting_runs,
        waiting_batches=args.waiting_batches,
        waiting_timeout_s=args.waiting_timeout_secs,
        settle_s=args.settle_secs,
        profile=args.profile,
        agent=args.agent,
        mock=mock_settings(args, scenario="tools"),
        command=command,
    )
    if args.keep_dir is not None:
        args.keep_dir.mkdir(parents=True, exist_ok=True)
    report = run_loop(run_runs_bench(plan, keep_dir=args.keep_dir))
    report["fd_limit"] = fd_limit
    stem = result_stem("runs", Path(args.profile).stem, machine_info(), utc_now(), args.name)
    for path in write_runs_report(report, args.out_dir, stem):
        print(path)
    return 0


def _deployment(args: argparse.Namespace, command: str) -> int:
    """`--server-url`: the points against nodes already running; exit 2 when it cannot start."""
    import os
    import sys

    from agentos.mock.loop import run_loop
    from agentos_bench.common.cli import report_stem
    from agentos_bench.common.deployment import Deployment, DeploymentError, parse_urls
    from agentos_bench.runs.deployment import run_deployment_points, write_deployment_report
    from agentos_bench.runs.plan import RunsPlan

    token = os.environ.get(args.admin_token_env, "")
    try:
        if args.campaign:
            raise DeploymentError("--campaign starts its own server and mock: not with --server-url")
        if not token:
            raise DeploymentError(f"--server-url needs an admin key in ${args.admin_token_env} (--admin-token-env)")
        deployment = Deployment(urls=parse_urls(args.server_url), admin_token=token)
    except DeploymentError as exc:
        print(f"agentos bench runs: refused to start: {exc}", file=sys.stderr)
        return 2
    delay = 1.0 if args.answer_delay_secs is None else args.answer_delay_secs
    plan = RunsPlan(
        points=_points(args.runs),
        answer_delay_s=delay,
        run_timeout_s=args.run_timeout_secs,
        waiting_runs=0,
        agent=args.agent,
        ramp_s=args.ramp_secs,
        command=command,
    )
    report = run_loop(run_deployment_points(plan, deployment))
    for path in write_deployment_report(report, args.out_dir, report_stem("runs-deployment", args.name)):
        print(path)
    return 0


def _campaign(args: argparse.Namespace, command: str, fd_limit: int) -> int:
    from agentos.mock.loop import run_loop
    from agentos_bench.common.cli import report_stem
    from agentos_bench.runs.bench import run_runs_bench
    from agentos_bench.runs.campaigns import CAMPAIGNS, campaign_plan
    from agentos_bench.runs.report import write_runs_report

    if args.scale <= 0:
        raise SystemExit("agentos bench runs: --scale must be > 0")
    plan = campaign_plan(CAMPAIGNS[args.campaign], args.scale, command, args.answer_delay_secs)
    if args.keep_dir is not None:
        args.keep_dir.mkdir(parents=True, exist_ok=True)
    report = run_loop(run_runs_bench(plan, keep_dir=args.keep_dir)) | {"fd_limit": fd_limit, "scale": args.scale}
    judged = report["judged"]
    print_report(
        write_runs_report(report, args.out_dir, report_stem(f"runs-{args.campaign}", args.name)),
        f"campaign {args.campaign}: p95 {judged['p95_holds']}; start errors {judged['start_errors']}; "
        f"completion {judged['completion']}",
    )
    return 0


HELP = "N concurrent agent runs (tools scenario) and 1000 runs waiting"
COMMAND = BenchCommand("runs", HELP, "agentos_bench.runs", __doc__, add_arguments, run_command)
main = COMMAND.main
