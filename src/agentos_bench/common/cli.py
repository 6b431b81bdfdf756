"""What every bench command's module shares: registering it, running it alone, its work directory,
the command line its report records, and its report's file stem."""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    from agentos.mock.server import MockSettings

T = TypeVar("T")
P = TypeVar("P", bound="DataclassInstance")


@dataclass(frozen=True)
class BenchCommand:
    """One `agentos bench <name>` command: its arguments and handler, registered under `agentos
    bench` and runnable alone as `python -m <module>` (parsed the same, its command line recorded
    under the `agentos bench` name in the report)."""

    name: str
    help: str
    module: str
    doc: str | None
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run_command: Callable[..., int]

    def register(self, commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
        """Add the command to `agentos bench`."""
        p = commands.add_parser(self.name, help=self.help)
        self.add_arguments(p)
        p.set_defaults(handler=self.run_command)

    def main(self, argv: list[str] | None = None) -> int:
        """`python -m <module> ...`."""
        parser = argparse.ArgumentParser(prog=f"python -m {self.module}", description=self.doc)
        self.add_arguments(parser)
        args = parser.parse_args(argv)
        quoted = " ".join(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
        return self.run_command(args, command=f"agentos bench {self.name} {quoted}".rstrip())


def report_stem(kind: str, name: str | None) -> str:
    """`<UTC time>-<machine>-<commit>-<kind>`: a second run never overwrites the first, and the
    file says what code it measured."""
    from agentos_bench.report.machine import git_commit, machine_info, machine_slug, utc_now

    machine = name or machine_slug(machine_info())
    return f"{utc_now():%Y-%m-%dT%H%M%SZ}-{machine}-{git_commit().replace('+', '-')}-{kind}"


def add_output_arguments(p: argparse.ArgumentParser) -> None:
    """`--keep-dir`, `--out-dir` and `--name`, the same on every bench command that runs processes."""
    from agentos_bench.report.output import DEFAULT_OUT_DIR  # stdlib only; ./bench-out is git-ignored

    p.add_argument("--keep-dir", type=Path, help="keep the data and logs there (default: a temporary dir)")
    help_text = f"where the report goes (default: ./{DEFAULT_OUT_DIR}; bench/results to commit one)"
    p.add_argument("--out-dir", type=Path, default=DEFAULT_OUT_DIR, help=help_text)
    p.add_argument("--name", help="machine name in the file names (default: cores + CPU model)")


def command_line(given: str | None = None) -> str:
    """The command a report records: `given` (`python -m ...` passes its own), else this process's."""
    return given or "agentos " + " ".join(shlex.quote(a) for a in sys.argv[1:])


def in_work_dir(keep_dir: Path | None, prefix: str, body: Callable[[Path], T]) -> T:
    """`body(work_dir)` in `keep_dir` (created if needed, kept), or in a temporary directory removed after."""
    if keep_dir is not None:
        keep_dir.mkdir(parents=True, exist_ok=True)
        return body(keep_dir)
    with tempfile.TemporaryDirectory(prefix=prefix) as work:
        return body(Path(work))


def mock_settings(args: argparse.Namespace, **more: Any) -> MockSettings:
    """The mock of the `--mock-ttft-ms`, `--mock-tps` and `--mock-tokens` options (`more`: its
    other settings). The mock is imported here, not at the top: registering a command stays cheap."""
    from agentos.mock.server import MockSettings

    return MockSettings(ttft_ms=args.mock_ttft_ms, tps=args.mock_tps, tokens=args.mock_tokens, **more)


def _option(field: str) -> str:
    """The option of a plan's field: `x` is `--x`, `x_s` is `--x-secs` (the bench's spelling of
    seconds); as argparse names its value."""
    return field[:-2] + "_secs" if field.endswith("_s") else field


def add_plan_arguments(p: argparse.ArgumentParser, defaults: DataclassInstance, **helps: str | None) -> None:
    """An option for each named field of the plan `defaults` (a number or a string), typed and
    defaulted by it, with its help text (None: none), in the order named: a default is stated
    once, in the plan, and `plan_from_args` reads the options back."""
    for field, help_text in helps.items():
        value = getattr(defaults, field)
        assert isinstance(value, int | float | str), f"{field}: not a number or a string"
        p.add_argument("--" + _option(field).replace("_", "-"), type=type(value), default=value, help=help_text)


def plan_from_args(plan: type[P], args: argparse.Namespace, **given: Any) -> P:
    """The dataclass `plan` with each field the command line sets (`_option`); a field with no
    option keeps its default; `given` wins over both."""
    options = {f.name: _option(f.name) for f in fields(plan)}
    read = {name: getattr(args, option) for name, option in options.items() if hasattr(args, option)}
    return plan(**(read | given))


def print_report(paths: Iterable[Path], *summary: str) -> None:
    """The report's files, one a line, then its summary lines."""
    for line in (*paths, *summary):
        print(line)


def print_outcome(paths: Iterable[Path], verdict: dict[str, dict[str, Any]]) -> None:
    """The report's files, then each target of its verdict: `met` or `NOT MET`, with its value."""
    print_report(
        paths, *(f"{'met' if v['met'] else 'NOT MET'}: {target} ({v['value']})" for target, v in verdict.items())
    )
