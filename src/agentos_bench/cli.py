"""`agentos bench ...`, wired into the `agentos` command by `agentos.cli` when `bench` is the command.

Thin: parse, then hand over (`cli_bench` and each tool's `cli`).
"""

from __future__ import annotations

import argparse


def register_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], help_text: str = "load and memory benchmarks"
) -> None:
    """Add `bench` and its sub-commands to the `agentos` parser."""
    from agentos_bench import cli_bench

    bench = commands.add_parser("bench", help=help_text)
    bench_commands = bench.add_subparsers(dest="bench_command", required=True)
    cli_bench.register(bench_commands)
    check = bench_commands.add_parser("check-mock", help="verify the tools-scenario contract of a running mock")
    check.add_argument("--url", required=True, help="the mock's base URL, ending in /v1 (as `agentos mock-llm check`)")
    check.set_defaults(handler=_check_mock)


def _check_mock(args: argparse.Namespace) -> int:
    from agentos.mock.main import check_mock

    return check_mock(args.url)
