"""Every `agentos bench` sub-command, through the `agentos` CLI, so none rots unnoticed.

A command runs here for real with the tiniest arguments it accepts when that takes seconds
(`sweep` with a peer that is not installed, `compare`, `memory`, `peers`, `check-mock`); the
others have a tiny real run of their own in the test file named in `REAL_RUN_ELSEWHERE`, and are
parsed here (`--help`), as is every `python -m agentos_bench.<tool>` entry point. A new
sub-command fails `test_every_sub_command_is_covered` until it is added to one of the two.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
from pathlib import Path

import pytest

from agentos.cli import build_parser, main
from agentos.mock.server import MockSettings
from agentos_bench.common.mock_process import start_mock_process
from agentos_bench.common.processes import stop_child

ROOT = Path(__file__).resolve().parents[2]
RUN_HERE = ("sweep", "compare", "memory", "peers", "check-mock")
REAL_RUN_ELSEWHERE = {  # command -> the test file with its tiny real run
    "fairness": "tests/bench/test_fairness_bench.py",
    "runs": "tests/bench/test_campaigns.py",
    "auth-cost": "tests/bench/test_auth_cost.py",
    "knowledge": "tests/bench/test_knowledge_bench.py",
    "load": "tests/bench/test_arrival_smoke.py",
    "faults": "tests/bench/test_faults.py",
    "fallback": "tests/bench/test_fallback.py",
    "overload": "tests/bench/test_overload_bench.py",
    "gate": "tests/bench/test_gate.py",
}
# python -m agentos_bench.<tool>
MODULE_MAINS = ("arrival", "authcost", "fallback", "faults", "knowledge", "overload", "runs")
TINY_MOCK = ["--mock-ttft-ms", "5", "--mock-tokens", "2"]


def _bench_commands() -> set[str]:
    parser = build_parser(with_bench=True)
    bench = _choices(parser)["bench"]
    return set(_choices(bench))


def _choices(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def test_every_sub_command_is_covered() -> None:
    assert _bench_commands() == {*RUN_HERE, *REAL_RUN_ELSEWHERE}
    for path in REAL_RUN_ELSEWHERE.values():
        assert (ROOT / path).is_file()


@pytest.mark.parametrize("command", sorted(REAL_RUN_ELSEWHERE))
def test_the_commands_run_elsewhere_parse(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", command, "--help"])
    assert exit_info.value.code == 0
    assert f"agentos bench {command}" in capsys.readouterr().out


@pytest.mark.parametrize("tool", MODULE_MAINS)
def test_each_tool_runs_alone(tool: str, capsys: pytest.CaptureFixture[str]) -> None:
    cli = importlib.import_module(f"agentos_bench.{tool}.cli")
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--help"])
    assert exit_info.value.code == 0
    assert f"python -m agentos_bench.{tool}" in capsys.readouterr().out


@pytest.mark.slow
def test_sweep_with_a_missing_peer_then_compare(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # anywhere: the profiles are package data
    out = tmp_path / "out"
    argv = ["bench", "sweep", "--profile", "no-store", "--sweep", "1", "--duration-secs", "0.5"]
    argv += ["--warmup-secs", "0.2", "--peers", "agno", "--peers-dir", str(tmp_path / "no-peers"), *TINY_MOCK]
    assert main([*argv, "--out-dir", str(out)]) == 0
    (report_path,) = out.glob("*-sweep-no-store+agno.json")
    report = json.loads(report_path.read_text())
    assert {row["target"] for row in report["rows"]} == {"direct", "server"}  # the peer has no rows
    (peer,) = report["peers"]
    assert (peer["name"], peer["measured"], peer["version"]) == ("agno", False, None)
    markdown = report_path.with_suffix(".md").read_text()
    assert "not measured (not installed in" in markdown and "- **Load average (1/5/15 min):** " in markdown
    assert main(["bench", "compare", str(report_path), str(report_path)]) == 0


@pytest.mark.slow
def test_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # anywhere: the profiles are package data
    argv = ["bench", "memory", "--sessions", "2", "--session-ttl-secs", "2", *TINY_MOCK]
    assert main([*argv, "--out-dir", str(tmp_path)]) == 0
    (report_path,) = tmp_path.glob("*-memory-no-store.json")
    assert len(json.loads(report_path.read_text())["steps"]) >= 2


def test_peers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "peers", "--peers-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"npm install --prefix {tmp_path / 'opencode'} opencode-ai@" in out and "langgraph" in out


@pytest.mark.slow
def test_check_mock(tmp_path: Path) -> None:
    async def check() -> int:
        child = await start_mock_process(MockSettings(ttft_ms=1.0, tps=5000.0, scenario="tools"), tmp_path)
        try:  # the command runs its own event loop: in a thread of its own
            return await asyncio.to_thread(main, ["bench", "check-mock", "--url", child.url])
        finally:
            await stop_child(child.process)

    assert asyncio.run(check()) == 0
