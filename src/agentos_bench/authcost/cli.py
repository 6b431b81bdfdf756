"""`agentos bench auth-cost`: parse arguments, run, write the report. Also runnable alone::

    python -m agentos_bench.authcost --rounds 5 --requests 20000

The method is in `agentos_bench.authcost.bench` (the package docstring has the theory). Heavy
imports happen in the handler, so registering the command costs the CLI nothing.
"""

from __future__ import annotations

import argparse

from agentos_bench.common.cli import BenchCommand, add_output_arguments, add_plan_arguments, command_line, in_work_dir


def add_arguments(p: argparse.ArgumentParser) -> None:
    from agentos_bench.authcost.plan import AuthCostPlan

    add_plan_arguments(
        p,
        AuthCostPlan(),
        rounds="rounds per configuration (A and B alternate)",
        requests="measured requests per round",
        concurrency="client keep-alive connections",
        tenants=None,
        keys_per_tenant=None,
        warmup_requests=None,
        round_timeout_s=None,
        micro_calls="calls per microbench figure (0: skip)",
    )
    add_output_arguments(p)


def run_command(args: argparse.Namespace, command: str | None = None) -> int:
    """Run the bench, write the report, print the files written; exit 1 unless every request succeeded."""
    from agentos.mock.loop import raise_fd_limit
    from agentos_bench.authcost.bench import run_auth_cost
    from agentos_bench.authcost.plan import AuthCostPlan
    from agentos_bench.authcost.report import write_auth_cost_report
    from agentos_bench.common.cli import plan_from_args, print_report, report_stem

    if min(args.rounds, args.requests, args.concurrency, args.tenants, args.keys_per_tenant) < 1:
        raise SystemExit("agentos bench auth-cost: rounds, requests, concurrency, tenants and keys must be >= 1")
    raise_fd_limit()
    plan = plan_from_args(AuthCostPlan, args, command=command_line(command))
    report = in_work_dir(args.keep_dir, "agentos-auth-cost-", lambda work: run_auth_cost(plan, work))
    summary = report["summary"]
    print_report(
        write_auth_cost_report(report, args.out_dir, report_stem("auth-cost", args.name)),
        f"server CPU ms/request: A {summary['open']['server_cpu_ms_per_request_median']:.4f}, "
        f"B {summary['keys']['server_cpu_ms_per_request_median']:.4f}, B - A {summary['added_cpu_ms_per_request']:.4f}",
    )
    return 0 if summary["valid"] else 1


HELP = "CPU per request of key lookup and rate limiting: open vs keys, A/B"
COMMAND = BenchCommand("auth-cost", HELP, "agentos_bench.authcost", __doc__, add_arguments, run_command)
main = COMMAND.main
