"""`agentos mock-llm` (the mock provider of the three wires, `agentos.mock`) and `agentos mock-llm check`."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentos.mock.settings import MockSettings

_MOCK_ENV = {"ttft_ms": "MOCK_TTFT_MS", "tps": "MOCK_TPS", "tokens": "MOCK_TOKENS"}
_MOCK_FLAGS: dict[str, type] = {
    "ttft_ms": float,
    "tps": float,
    "tokens": int,
    "error_rate": float,
    "fail_every": int,
    "retry_after_s": float,
    "hang_rate": float,
    "stream_error_after": int,
    "seed": int,
}


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `mock-llm` (and its `check`) to the `agentos` parser."""
    mock = commands.add_parser(
        "mock-llm", help="run the mock provider (chat completions, Responses API and Anthropic Messages)"
    )
    for name, kind in _MOCK_FLAGS.items():
        env = f" (env {_MOCK_ENV[name]})" if name in _MOCK_ENV else ""
        mock.add_argument(f"--{name.replace('_', '-')}", type=kind, help=f"{name}{env}")
    mock.add_argument("--scenario", choices=["plain", "tools", "light", "heavy", "parallel"])
    mock.add_argument("--host", default="127.0.0.1")
    mock.add_argument("--port", type=int, default=0, help="0: a free port")
    mock.set_defaults(handler=_run_mock)
    sub = mock.add_subparsers(dest="mock_command")
    add_check_command(sub, "check")


def add_check_command(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str) -> None:
    """The contract check of a running mock, as `name` under `sub` (`agentos bench check-mock` too)."""
    check = sub.add_parser(name, help="verify the tools-scenario contract of a running mock")
    check.add_argument("--url", required=True, help="the mock's base URL, ending in /v1")
    check.set_defaults(handler=_check_mock)


def mock_settings_from(args: argparse.Namespace, environ: Mapping[str, str]) -> MockSettings:
    """Flags win over `MOCK_*` env vars, which win over the defaults."""
    from agentos.mock.settings import MockSettings

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
    from agentos.mock.main import serve_mock

    return serve_mock(mock_settings_from(args, os.environ), args.host, args.port)


def _check_mock(args: argparse.Namespace) -> int:
    from agentos.mock.main import check_mock

    return check_mock(args.url)
