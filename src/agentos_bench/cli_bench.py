"""`agentos bench sweep|memory|compare` (`runs`, `fairness`, `auth-cost`, `overload`: their own modules).

Parse, run, write.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

from agentos_bench.common.cli import command_line, mock_settings, plan_from_args

_RESULTS = Path("bench/results")


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `sweep`, `memory`, `compare`, `runs`, `auth-cost`, `knowledge`, `load`, `faults`, `fallback` and
    `overload` to `agentos bench`."""
    _register_sweep(commands)
    _register_memory(commands)
    from agentos_bench.load import fairness_cli  # `agentos bench fairness` (tenants sharing the provider)

    fairness_cli.register(commands)
    compare = commands.add_parser("compare", help="compare two report JSONs; exit 1 on a regression")
    compare.add_argument("old", type=Path, help="the baseline report (A)")
    compare.add_argument("new", type=Path, help="the new report (B)")
    compare.add_argument("--threshold", type=float, default=0.20, help="growth that counts as a regression")
    compare.set_defaults(handler=_compare)
    from agentos_bench import gate  # `agentos bench gate` (CI's regression alarm)

    gate_parser = commands.add_parser(
        "gate", help="a short sweep judged against the committed baseline; exit 1 on a regression"
    )
    gate.add_arguments(gate_parser)
    gate_parser.set_defaults(handler=gate.run_gate)
    from agentos_bench.runs import cli as runs_cli  # `agentos bench runs` (agent runs)

    runs_cli.COMMAND.register(commands)
    commands.choices["runs"].set_defaults(handler=_checked("runs", runs_cli.run_command, lambda a: [a.profile]))
    from agentos_bench.authcost import cli as auth_cost_cli  # `agentos bench auth-cost`

    auth_cost_cli.COMMAND.register(commands)
    from agentos_bench.knowledge import cli as knowledge_cli  # `agentos bench knowledge`

    knowledge_cli.COMMAND.register(commands)
    from agentos_bench.arrival import cli as load_cli  # `agentos bench load` (open arrival)

    load_cli.COMMAND.register(commands)
    from agentos_bench.faults import cli as faults_cli  # `agentos bench faults`

    faults_cli.COMMAND.register(commands)
    from agentos_bench.fallback import cli as fallback_cli  # `agentos bench fallback` (the router's fault campaign)

    fallback_cli.COMMAND.register(commands)
    from agentos_bench.overload import cli as overload_cli  # `agentos bench overload` (the 429 path)

    overload_cli.COMMAND.register(commands)


Handler = Callable[[argparse.Namespace], int]


def _checked(command: str, handler: Handler, profiles: Callable[[argparse.Namespace], Sequence[str]]) -> Handler:
    """`handler`, after the checks that need no measuring: a missing profile or a missing
    matplotlib would otherwise surface after the whole measurement, with nothing saved."""

    def run(args: argparse.Namespace) -> int:
        for name in profiles(args):
            check_profile(name)
        check_plots(command)
        return handler(args)

    return run


def check_profile(name: str) -> Path:
    """Raises:
    ConfigError: `name` is neither a file nor a packaged profile (`agentos_bench/profiles`).
    """
    from agentos.errors import ConfigError
    from agentos_bench.common.processes import BenchSetupError, profile_names, resolve_profile

    try:
        return resolve_profile(name)
    except BenchSetupError:
        names = ", ".join(profile_names())
        message = f"--profile {name}: no such profile (packaged: {names}); pass a path to a TOML file"
        raise ConfigError(message) from None


def check_plots(command: str) -> None:
    """Say before measuring that the plots will be skipped when matplotlib (the bench extra) is
    missing: the run goes on and its Markdown and JSON are written, saying so too."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print(
            f"agentos: bench {command}: matplotlib is not installed: the report's plots will be skipped"
            " (pip install 'agentos[bench]' draws them)",
            file=sys.stderr,
        )


def _add_mock_flags(p: argparse.ArgumentParser, ttft_ms: float, tps: float, tokens: int) -> None:
    p.add_argument("--mock-ttft-ms", type=float, default=ttft_ms)
    p.add_argument("--mock-tps", type=float, default=tps)
    p.add_argument("--mock-tokens", type=int, default=tokens)


def _add_output_flags(p: argparse.ArgumentParser) -> None:
    from agentos_bench.report.output import DEFAULT_OUT_DIR  # stdlib only; ./bench-out is git-ignored

    help_text = f"where the report goes (default: ./{DEFAULT_OUT_DIR}; {_RESULTS} to commit one)"
    p.add_argument("--out-dir", type=Path, default=DEFAULT_OUT_DIR, help=help_text)
    p.add_argument("--name", help="machine name in the file names (default: cores + CPU model)")


def _register_sweep(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sweep = commands.add_parser("sweep", help="closed-loop load sweep over concurrency points")
    sweep.add_argument("--sweep", default="1,2,4,8,16,32,64", help="concurrency points, comma-separated")
    sweep.add_argument("--profile", default="no-store", help="profile names (packaged) or TOML paths, comma-separated")
    sweep.add_argument("--target", choices=["both", "server", "direct"], default="both")
    sweep.add_argument("--duration-secs", type=float, default=15.0)
    sweep.add_argument("--warmup-secs", type=float, default=3.0)
    sweep.add_argument("--turn-timeout-secs", type=float, default=60.0)
    sweep.add_argument("--sessions", type=int, help="sessions per point; must equal the concurrency (one point)")
    sweep.add_argument("--concurrency", type=int, help="a single point (same as --sweep N)")
    sweep.add_argument("--server-url", help="measure an already running server instead of starting one")
    sweep.add_argument("--server-pid", type=int, help="its pid, for CPU and memory")
    sweep.add_argument("--mock-url", help="use an already running mock (…/v1)")
    sweep.add_argument("--mock-pid", type=int)
    sweep.add_argument("--keep-data", action="store_true", help="keep the temporary data and logs")
    sweep.add_argument(
        "--tenants",
        type=int,
        default=0,
        help="spread the users round-robin over N tenants, one API key each (default 0: one tenant, no keys)",
    )
    sweep.add_argument(
        "--idp-url",
        default="",
        help="with --tenants: each tenant's requests carry an end user's JWT from this identity provider"
        " (bench/scripts/bench_idp.py; the profile's [identity] must trust it) instead of an API key",
    )
    sweep.add_argument(
        "--nodes",
        type=int,
        default=1,
        help="server processes per profile sharing its PostgreSQL store and Redis (default 1; >1 needs both)",
    )
    sweep.add_argument(
        "--workers",
        type=int,
        default=1,
        help="agentos serve --workers N for each profile's server (default 1; >1 needs PostgreSQL + Redis)",
    )
    sweep.add_argument("--server-cpus", default="", help="taskset CPU list for the server and its workers (0-3)")
    sweep.add_argument("--mock-cpus", default="", help="taskset CPU list for the mock (4)")
    sweep.add_argument("--loadgen-cpus", default="", help="CPU list for this process, the load generator (5)")
    sweep.add_argument(
        "--spread",
        choices=["session", "turn"],
        default="session",
        help="with --nodes: a session's turns on its node (default), or each turn on the next node",
    )
    sweep.add_argument(
        "--api",
        choices=["native", "openai"],
        default="native",
        help="each turn via POST /v1/sessions/{id}/turns (default) or /v1/chat/completions with X-Session-Id",
    )
    sweep.add_argument(
        "--double-text",
        choices=["none", "enqueue"],
        default="none",
        help="enqueue: each turn is a pair, the second sent with on_busy enqueue while the first runs (both count)",
    )
    from agentos_bench.peers import cli as peers_cli  # `--peers`: other agent servers on the same mock

    peers_cli.add_sweep_arguments(sweep)
    peers_cli.register(commands)
    _add_mock_flags(sweep, 2000.0, 200.0, 8)
    _add_output_flags(sweep)
    sweep.set_defaults(handler=_checked("sweep", _sweep, _sweep_profiles))


def _register_memory(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    memory = commands.add_parser("memory", help="per-item memory staircase of the server (sessions, runs, sandboxes)")
    memory.add_argument(
        "--workload",
        choices=["idle", "turn", "waiting", "sandbox"],
        default="turn",
        help="idle sessions, sessions with one completed turn (default), runs waiting for a human, ready sandboxes",
    )
    memory.add_argument("--sessions", type=int, default=200, help="items at the top of the staircase")
    memory.add_argument("--step", type=int, default=1, help="items added between two samples")
    memory.add_argument("--profile", help="default: no-store (idle, turn), runs (waiting, sandbox)")
    memory.add_argument("--session-ttl-secs", type=float, help="default: long enough for the whole climb")
    memory.add_argument("--settle-secs", type=float, default=0.1)
    memory.add_argument("--input-bytes", type=int, default=0, help='turn: each turn\'s input size (0: "hello")')
    memory.add_argument("--sandbox-points", type=int, default=4, help="sandbox: servers besides the one with none")
    memory.add_argument(
        "--tracemalloc", action="store_true", help="start the server with tracemalloc: the Python heap column"
    )
    memory.add_argument(
        "--server-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="added to the server's environment (AGENTOS_MEMORY_TRIM_AFTER_EVICTIONS=0, PYTHONMALLOC=malloc)",
    )
    _add_mock_flags(memory, 5.0, 2000.0, 8)
    _add_output_flags(memory)
    memory.set_defaults(handler=_checked("memory", _memory, lambda a: [_memory_profile(a)]))


def _memory_profile(args: argparse.Namespace) -> str:
    from agentos_bench.memory.staircase import default_profile

    return str(args.profile or default_profile(args.workload))


def _server_env(pairs: Sequence[str]) -> tuple[tuple[str, str], ...]:
    env = []
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise SystemExit(f"agentos bench memory: --server-env {pair!r}: expected NAME=VALUE")
        env.append((name, value))
    return tuple(env)


def _points(args: argparse.Namespace) -> list[int]:
    if args.sessions is not None and args.concurrency is not None and args.sessions != args.concurrency:
        raise SystemExit("agentos bench sweep: --sessions must equal --concurrency (one session per worker)")
    single = args.concurrency or args.sessions
    return [single] if single else [int(p) for p in args.sweep.split(",") if p.strip()]


def _sweep_profiles(args: argparse.Namespace) -> list[str]:
    """The profiles the sweep starts a server with (none for `--target direct` or `--server-url`)."""
    if args.target == "direct" or args.server_url:
        return []
    return [p for p in args.profile.split(",") if p]


def _check_tenants(args: argparse.Namespace) -> None:
    if args.tenants < 0:
        raise SystemExit("agentos bench sweep: --tenants must be 0 (one tenant, no keys) or more")
    if args.idp_url and not args.tenants:
        raise SystemExit("agentos bench sweep: --idp-url signs in each tenant's user: it needs --tenants N")
    if args.tenants and args.server_url and not os.environ.get("AGENTOS_API_TOKEN"):
        raise SystemExit("agentos bench sweep: --tenants with --server-url needs that server's AGENTOS_API_TOKEN")


def _check_workers(args: argparse.Namespace) -> None:
    """Raises:
    ConfigError: --workers N, or a CPU list, that cannot run: one line, exit 2.
    """
    from agentos.errors import ConfigError
    from agentos_bench.common.pinning import parse_cpus

    if args.workers < 1:
        raise ConfigError(f"bench sweep --workers {args.workers}: must be 1 or more")
    if args.workers > 1 and args.server_url:
        raise ConfigError(f"bench sweep --workers {args.workers}: not with --server-url (the bench starts the server)")
    for cpus in (args.server_cpus, args.mock_cpus, args.loadgen_cpus):
        parse_cpus(cpus)


def _check_nodes(args: argparse.Namespace) -> None:
    """Raises:
    ConfigError: --nodes N that the profiles (or an external server) cannot run: one line, exit 2.
    """
    from agentos.errors import ConfigError
    from agentos_bench.load.cluster import nodes_problem, profile_settings

    if args.nodes < 1:
        raise ConfigError(f"bench sweep --nodes {args.nodes}: must be 1 or more")
    if args.nodes > 1 and args.server_url:
        raise ConfigError(f"bench sweep --nodes {args.nodes}: not with --server-url (the bench starts the nodes)")
    if args.nodes > 1 and args.api == "openai":
        raise ConfigError(f"bench sweep --nodes {args.nodes}: --api openai runs on one node only")
    if args.double_text != "none" and (args.nodes > 1 or args.api == "openai"):
        raise ConfigError(f"bench sweep --double-text {args.double_text}: native turns on one node only")
    for name in _sweep_profiles(args):
        if problem := nodes_problem(profile_settings(check_profile(name)), args.nodes):
            raise ConfigError(f"bench sweep --nodes {args.nodes}: profile {name!r} {problem}")


def _sweep(args: argparse.Namespace) -> int:
    from agentos.mock.loop import raise_fd_limit, run_loop
    from agentos_bench.common.pinning import pin_self
    from agentos_bench.load.sweep import run_sweep
    from agentos_bench.load.sweep_plan import SweepPlan
    from agentos_bench.peers.catalog import default_peers_dir
    from agentos_bench.peers.cli import peer_names
    from agentos_bench.peers.launch import peer_runner

    peers = peer_names(args.peers)
    _check_tenants(args)
    _check_nodes(args)
    _check_workers(args)
    pin_self(args.loadgen_cpus)
    raise_fd_limit()
    plan = plan_from_args(
        SweepPlan,
        args,
        points=_points(args),
        profiles=[] if args.target == "direct" else [p for p in args.profile.split(",") if p],
        direct=args.target in ("both", "direct"),
        mock=mock_settings(args),
        server_url=args.server_url if args.target != "direct" else None,
        command=command_line(),
        peers=peers,
        peer_runner=peer_runner(args.peers_dir or default_peers_dir()) if peers else None,
    )
    report = run_loop(run_sweep(plan))
    label = "+".join([*report["profiles"], *peers]) or "direct"
    if args.api == "openai" and report["profiles"]:
        label += "-openai"
    if args.double_text != "none" and report["profiles"]:
        label += f"-{args.double_text}"
    if args.nodes > 1 and report["profiles"]:
        label += f"-{args.nodes}nodes" + ("-turn-spread" if args.spread == "turn" else "")
    if args.workers > 1 and report["profiles"]:
        label += f"-{args.workers}workers"
    return _write(report, "sweep", label, args)


def _memory(args: argparse.Namespace) -> int:
    from agentos.mock.loop import raise_fd_limit, run_loop
    from agentos_bench.memory.staircase import MemoryPlan, run_memory

    if args.sessions < 1 or args.step < 1 or args.sandbox_points < 1:
        raise SystemExit("agentos bench memory: --sessions, --step and --sandbox-points must be 1 or more")
    raise_fd_limit()
    profile = _memory_profile(args)
    scenario: Literal["tools", "plain"] = "tools" if args.workload == "waiting" else "plain"
    plan = plan_from_args(
        MemoryPlan,
        args,
        profile=profile,
        server_env=_server_env(args.server_env),
        input_bytes=max(0, args.input_bytes),
        mock=mock_settings(args, scenario=scenario),
        command=command_line(),
    )
    report = run_loop(run_memory(plan))
    label = profile if args.workload == "turn" else f"{profile}-{args.workload}"
    return _write(report, "memory", label, args)


def _write(report: dict[str, object], kind: str, label: str, args: argparse.Namespace) -> int:
    from agentos_bench.report.document import write_report
    from agentos_bench.report.machine import machine_info, result_stem, utc_now

    stem = result_stem(kind, Path(label).stem, machine_info(), utc_now(), args.name)
    for path in write_report(dict(report), args.out_dir, stem):
        print(path)
    return 0


def _compare(args: argparse.Namespace) -> int:
    from agentos_bench.report.compare import compare_reports, format_comparisons
    from agentos_bench.report.document import load_report

    try:
        comparisons = compare_reports(load_report(args.old), load_report(args.new), args.threshold)
    except (ValueError, OSError) as exc:
        print(f"agentos bench compare: {exc}", file=sys.stderr)
        return 2
    print(format_comparisons(comparisons))
    return 1 if any(c.regression for c in comparisons) else 0
