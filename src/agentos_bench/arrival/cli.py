"""`agentos bench load`: the open-arrival load (docs/benchmarking.md). Also runnable alone::

    python -m agentos_bench.arrival --scale 0.02

Heavy imports happen in the handler, so registering the command costs the CLI nothing.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from agentos_bench.common.cli import BenchCommand, add_output_arguments, command_line, in_work_dir, print_report

if TYPE_CHECKING:
    from agentos_bench.common.deployment import Deployment


def add_arguments(p: argparse.ArgumentParser) -> None:
    from agentos_bench.arrival.scenario import DEFAULT_SCENARIO

    p.add_argument("--scenario", type=Path, default=DEFAULT_SCENARIO, help="the mix, phases and thresholds (TOML)")
    p.add_argument("--scale", type=float, default=1.0, help="every phase's length x this; the rates stay")
    p.add_argument("--rate-multiplier", type=float, default=1.0, help="every rate x this (a capacity run)")
    connections = "the generator's socket limit (default: peak rate x the longest timeout)"
    p.add_argument("--connections", type=int, help=connections)
    p.add_argument("--mock-ttft-ms", type=float, default=200.0)
    p.add_argument("--mock-tps", type=float, default=100.0)
    p.add_argument("--mock-tokens", type=int, default=16)
    p.add_argument("--mock-error-rate", type=float, default=0.0, help="share of model calls answered 500")
    p.add_argument("--mock-hang-rate", type=float, default=0.0, help="share of model calls held open")
    deployment = p.add_argument_group("a deployment already running (the --mock-* options do not apply)")
    deployment.add_argument("--server-url", help="URL[,URL...]: its nodes, taken in turn; or one balancer's URL")
    token_help = "the environment variable holding an admin key (never given on the command line)"
    deployment.add_argument("--admin-token-env", default="AGENTOS_API_TOKEN", help=token_help)
    deployment.add_argument("--database-url", help="its PostgreSQL: connections by state, sampled every second")
    deployment.add_argument("--mock-url", help="its provider's URL, checked before the run when given")
    add_output_arguments(p)


def run_command(args: argparse.Namespace, command: str | None = None) -> int:
    """Run, write the report, print the files written and the verdict; 2 when the run could not start."""
    from agentos.errors import ConfigError
    from agentos.mock.loop import raise_fd_limit, run_loop
    from agentos_bench.arrival.bench import LoadPlan, run_deployment, run_load
    from agentos_bench.arrival.fixture import PreflightError
    from agentos_bench.arrival.report import write_load_report
    from agentos_bench.arrival.scenario import ScenarioError, read_scenario
    from agentos_bench.common.cli import mock_settings, report_stem
    from agentos_bench.common.deployment import DeploymentError
    from agentos_bench.common.processes import BenchSetupError
    from agentos_bench.report.machine import report_head

    if args.scale <= 0 or args.rate_multiplier <= 0 or (args.connections is not None and args.connections < 1):
        raise SystemExit("agentos bench load: --scale and --rate-multiplier must be > 0, --connections >= 1")
    try:
        scenario = read_scenario(args.scenario)
        mock = mock_settings(args, error_rate=args.mock_error_rate, hang_rate=args.mock_hang_rate, scenario="tools")
    except (ScenarioError, ConfigError) as exc:
        raise SystemExit(f"agentos bench load: {exc}") from None
    command = redacted(command_line(command))
    plan = LoadPlan(
        scenario=scenario,
        scale=args.scale,
        rate_multiplier=args.rate_multiplier,
        connections=args.connections,
        mock=mock,
        command=command,
    )
    raise_fd_limit()  # the connection limit can be thousands of sockets
    try:
        deployment = _deployment(args)
        if deployment is None:
            result = in_work_dir(args.keep_dir, "agentos-load-", lambda work: run_loop(run_load(plan, work)))
        else:
            result = run_loop(run_deployment(plan, deployment))
    except (PreflightError, BenchSetupError, DeploymentError) as exc:
        print(f"agentos bench load: refused to start: {exc}", file=sys.stderr)
        return 2
    topology = _STARTED if deployment is None else deployment.topology()
    report = {
        **report_head("load", topology, command),
        "mock": None
        if deployment is not None
        else {
            "ttft_ms": mock.ttft_ms,
            "tps": mock.tps,
            "tokens": mock.tokens,
            "scenario": mock.scenario,
            "error_rate": mock.error_rate,
            "hang_rate": mock.hang_rate,
        },
        "scenario_text": _scenario_text(plan),
        "plan": {"scale": plan.scale, "rate_multiplier": plan.rate_multiplier, "connections": plan.connection_limit},
        **result,
    }
    verdict = ", ".join(f"{k} {v['status']}" for k, v in (report["verdict"] or {}).items())
    print_report(
        write_load_report(report, args.out_dir, report_stem("load", args.name)),
        f"verdict: {verdict or 'none (unusable report)'}",
    )
    return 0


_STARTED = (
    "one machine, loopback only: the server (`agentos serve`, one process, SQLite, its defaults), "
    "the mock provider (`agentos mock-llm`, its own process), the generator (this process)"
)


def _deployment(args: argparse.Namespace) -> Deployment | None:
    """`--server-url` and its companions; None without it (the bench starts its own server).

    Raises: DeploymentError (a bad URL, no admin key in the named variable)."""
    from agentos_bench.common.deployment import Deployment, DeploymentError, parse_urls

    if args.server_url is None:
        if args.database_url or args.mock_url:
            raise DeploymentError("--database-url and --mock-url go with --server-url")
        return None
    token = os.environ.get(args.admin_token_env, "")
    if not token:
        raise DeploymentError(f"--server-url needs an admin key in ${args.admin_token_env} (--admin-token-env)")
    urls = parse_urls(args.server_url)
    mock_url = args.mock_url.rstrip("/") if args.mock_url else None
    return Deployment(urls=urls, admin_token=token, database_url=args.database_url, mock_url=mock_url)


def redacted(command: str) -> str:
    """The command as the report prints it: a password inside a URL (`--database-url
    postgresql://user:secret@host/db`) becomes `***`."""
    return re.sub(r"(://[^:/@\s]+:)[^@\s]+@", r"\1***@", command)


def _scenario_text(plan: object) -> str:
    from agentos_bench.arrival.bench import LoadPlan

    assert isinstance(plan, LoadPlan)
    s = plan.scenario
    mix = ", ".join(f"`{load.kind}` {load.share * 100:g}%" for load in s.loads)
    phases = ", ".join(
        f"`{p.name}` {p.seconds * plan.scale:g} s at {p.rate * plan.rate_multiplier:g}/s" for p in s.phases
    )
    return f"{mix}; phases {phases} (scale {plan.scale:g}, rate x{plan.rate_multiplier:g})"


HELP = "open-arrival load: the seed's mix and phases, thresholds per load"
COMMAND = BenchCommand("load", HELP, "agentos_bench.arrival", __doc__, add_arguments, run_command)
main = COMMAND.main
