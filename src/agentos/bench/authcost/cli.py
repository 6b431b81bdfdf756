"""`agentos bench auth-cost`: parse arguments, run, write the report. Also runnable alone::

    python -m agentos.bench.authcost --rounds 5 --requests 20000

The method is in `agentos.bench.authcost.bench` (the package docstring has the theory). Heavy
imports happen in the handler, so registering the command costs the CLI nothing.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
from pathlib import Path

_RESULTS = Path("bench/results")


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `auth-cost` to `agentos bench`."""
    p = commands.add_parser("auth-cost", help="CPU per request of key lookup and rate limiting: open vs keys, A/B")
    add_arguments(p)
    p.set_defaults(handler=run_command)


def add_arguments(p: argparse.ArgumentParser) -> None:
    from agentos.bench.report.output import DEFAULT_OUT_DIR  # stdlib only; ./bench-out is git-ignored

    p.add_argument("--rounds", type=int, default=5, help="rounds per configuration (A and B alternate)")
    p.add_argument("--requests", type=int, default=20_000, help="measured requests per round")
    p.add_argument("--concurrency", type=int, default=32, help="client keep-alive connections")
    p.add_argument("--tenants", type=int, default=100)
    p.add_argument("--keys-per-tenant", type=int, default=10)
    p.add_argument("--warmup-requests", type=int, default=1_000)
    p.add_argument("--round-timeout-secs", type=float, default=120.0)
    p.add_argument("--micro-calls", type=int, default=20_000, help="calls per microbench figure (0: skip)")
    p.add_argument("--keep-dir", type=Path, help="keep the data and logs there (default: a temporary dir)")
    help_text = f"where the report goes (default: ./{DEFAULT_OUT_DIR}; {_RESULTS} to commit one)"
    p.add_argument("--out-dir", type=Path, default=DEFAULT_OUT_DIR, help=help_text)
    p.add_argument("--name", help="machine name in the file names (default: cores + CPU model)")


def run_command(args: argparse.Namespace, command: str | None = None) -> int:
    """Run the bench, write the report, print the files written; exit 1 unless every request succeeded."""
    from agentos.bench.authcost.bench import run_auth_cost
    from agentos.bench.authcost.plan import AuthCostPlan
    from agentos.bench.authcost.report import write_auth_cost_report
    from agentos.bench.common.loop import raise_fd_limit
    from agentos.bench.report.machine import machine_info, machine_slug, utc_now

    if min(args.rounds, args.requests, args.concurrency, args.tenants, args.keys_per_tenant) < 1:
        raise SystemExit("agentos bench auth-cost: rounds, requests, concurrency, tenants and keys must be >= 1")
    raise_fd_limit()
    plan = AuthCostPlan(
        rounds=args.rounds,
        requests=args.requests,
        concurrency=args.concurrency,
        tenants=args.tenants,
        keys_per_tenant=args.keys_per_tenant,
        warmup_requests=args.warmup_requests,
        round_timeout_s=args.round_timeout_secs,
        micro_calls=args.micro_calls,
        command=command or "agentos " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
    )
    if args.keep_dir is not None:
        args.keep_dir.mkdir(parents=True, exist_ok=True)
        report = run_auth_cost(plan, args.keep_dir)
    else:
        with tempfile.TemporaryDirectory(prefix="agentos-auth-cost-") as work:
            report = run_auth_cost(plan, Path(work))
    stem = f"{utc_now():%Y-%m-%dT%H%M%SZ}-{args.name or machine_slug(machine_info())}-auth-cost"
    for path in write_auth_cost_report(report, args.out_dir, stem):
        print(path)
    summary = report["summary"]
    print(
        f"server CPU ms/request: A {summary['open']['server_cpu_ms_per_request_median']:.4f}, "
        f"B {summary['keys']['server_cpu_ms_per_request_median']:.4f}, B - A {summary['added_cpu_ms_per_request']:.4f}"
    )
    return 0 if summary["valid"] else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agentos.bench.authcost", description=__doc__)
    add_arguments(parser)
    args = parser.parse_args(argv)
    quoted = " ".join(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    return run_command(args, command=f"agentos bench auth-cost {quoted}".rstrip())


if __name__ == "__main__":
    sys.exit(main())
