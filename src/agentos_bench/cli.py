"""`agentos mock-llm` and `agentos bench ...` (owned by the bench kit). Thin: parse, then hand over."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from typing import Any

_MOCK_ENV = {"ttft_ms": "MOCK_TTFT_MS", "tps": "MOCK_TPS", "tokens": "MOCK_TOKENS"}
_MOCK_FLAGS: dict[str, type] = {
    "ttft_ms": float,
    "tps": float,
    "tokens": int,
    "error_rate": float,
    "fail_every": int,
    "retry_after_s": float,
    "hang_rate": float,
    "seed": int,
}


def register_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the bench kit's sub-commands to the `agentos` parser."""
    _register_mock(commands)
    bench = commands.add_parser("bench", help="load and memory benchmarks")
    bench_commands = bench.add_subparsers(dest="bench_command", required=True)
    from agentos.bench import cli_bench

    cli_bench.register(bench_commands)
    check = bench_commands.add_parser("check-mock", help="verify the tools-scenario contract of a running mock")
    check.add_argument("--url", required=True, help="the mock's base URL, ending in /v1")
    check.set_defaults(handler=_check_mock)


def _register_mock(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    mock = commands.add_parser("mock-llm", help="run the mock OpenAI-compatible provider")
    for name, kind in _MOCK_FLAGS.items():
        env = f" (env {_MOCK_ENV[name]})" if name in _MOCK_ENV else ""
        mock.add_argument(f"--{name.replace('_', '-')}", type=kind, help=f"{name}{env}")
    mock.add_argument("--scenario", choices=["plain", "tools", "light", "heavy"])
    mock.add_argument("--host", default="127.0.0.1")
    mock.add_argument("--port", type=int, default=0, help="0: a free port")
    mock.set_defaults(handler=_run_mock)
    sub = mock.add_subparsers(dest="mock_command")
    check = sub.add_parser("check", help="verify the tools-scenario contract of a running mock")
    check.add_argument("--url", required=True, help="the mock's base URL, ending in /v1")
    check.set_defaults(handler=_check_mock)


def mock_settings_from(args: argparse.Namespace, environ: Mapping[str, str]) -> Any:
    """Flags win over `MOCK_*` env vars, which win over the defaults."""
    from agentos.bench.mock.server import MockSettings

    values: dict[str, Any] = {}
    for name, kind in _MOCK_FLAGS.items():
        flag = getattr(args, name, None)
        env = environ.get(_MOCK_ENV.get(name, ""))
        if flag is not None:
            values[name] = flag
        elif env:
            values[name] = kind(env)
    if getattr(args, "scenario", None):
        values["scenario"] = args.scenario
    return MockSettings(**values)


def _run_mock(args: argparse.Namespace) -> int:
    from agentos.bench.mock.main import serve_mock

    return serve_mock(mock_settings_from(args, os.environ), args.host, args.port)


def _check_mock(args: argparse.Namespace) -> int:
    from agentos.bench.mock.main import check_mock

    return check_mock(args.url)
