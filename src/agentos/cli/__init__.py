"""The `agentos` command: parse arguments, build Settings, hand over. No logic lives here.

One module per command family: `serve` (`serve`, `config show`, the settings flags), `db`,
`admin` (`tenants`, `keys`), `usage`, `mock` (`mock-llm`). `agentos bench ...` belongs to the
bench kit (`agentos_bench.cli`), a separate package: it is imported only when `bench` is the
command, so `agentos serve` never loads it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from agentos import __version__
from agentos.cli import admin, db, mock, serve, usage
from agentos.cli.serve import settings_from_args
from agentos.errors import ConfigError

__all__ = ["build_parser", "main", "parse_args", "settings_from_args"]

BENCH_HELP = "load and memory benchmarks (the agentos_bench package)"


def build_parser(*, with_bench: bool = False) -> argparse.ArgumentParser:
    """The `agentos` parser; `with_bench` adds the bench kit's sub-commands (importing `agentos_bench`).

    Without it `bench` is listed in the help but parses nothing: `main` asks for the bench kit
    only when `bench` is the command.
    """
    parser = argparse.ArgumentParser(prog="agentos", description="Agent OS: host LLM agents at scale.")
    parser.add_argument("--version", action="version", version=f"agentos {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    serve.register(commands)
    db.register(commands)
    admin.register(commands, os.environ)
    usage.register(commands, os.environ)
    mock.register(commands)
    if with_bench:
        from agentos_bench.cli import register_commands

        register_commands(commands, help_text=BENCH_HELP)
    else:
        commands.add_parser("bench", help=BENCH_HELP)
    return parser


def command_of(argv: Sequence[str]) -> str | None:
    """The sub-command `argv` names: its first word that is not a flag (the top level takes no values)."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """Like `parser.parse_args`, but an unknown flag is reported with the usage of the command
    it was given to (`agentos serve --bogus` shows serve's flags, not the list of commands)."""
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        _command_parser(parser, args).error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


def _command_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The deepest sub-command parser that `args` went through."""
    for action in parser._actions:  # argparse keeps its sub-commands here and nowhere public
        if isinstance(action, argparse._SubParsersAction) and getattr(args, action.dest, None) in action.choices:
            return _command_parser(action.choices[getattr(args, action.dest)], args)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(build_parser(with_bench=command_of(argv) == "bench"), argv)
    try:
        result: int = args.handler(args)
    except ConfigError as exc:
        print(f"agentos: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return result
