"""The README's "Your first agent run", executed as written: the docs cannot drift from the code.

The blocks between `<!-- first-run:start -->` and `<!-- first-run:end -->` are taken from
README.md: the first is the `agentos serve ...` command, started here as `python -m agentos serve`
with the same arguments on an ephemeral port; the others are run by bash (`set -euo pipefail`)
with that port in place of the README's 8080. The run must end completed, with two approved
commands and an answered question, and neither the server nor the script may print a traceback.
"""

from __future__ import annotations

import asyncio
import re
import shlex
import shutil
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import pytest

from agentos.cli import build_parser, settings_from_args
from agentos.config import MockConfig
from agentos.mock.builtin import builtin_mock
from agentos.mock.check import AGENT_TOOLS
from agentos.testing import Event, sse_events
from tests.conftest import child_env

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("curl") is None, reason="the README uses curl")]

README = Path(__file__).resolve().parents[2] / "README.md"
_README_ADDRESS = "localhost:8080"
_SCRIPT_TIMEOUT_S = 90.0  # the steps take a few seconds; five minutes is the promise to a newcomer


def first_run_blocks(readme: str) -> tuple[list[str], str]:
    """The `serve` arguments and the client script of the README's first run."""
    section = readme.split("<!-- first-run:start -->", 1)[1].split("<!-- first-run:end -->", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) >= 2, "the first run is a `serve` block, then the client's block(s)"
    serve, _, args = blocks[0].strip().partition("agentos serve")
    assert serve.strip() in ("", ".venv/bin/"), blocks[0]
    script = "\n".join(blocks[1:])
    assert _README_ADDRESS in script
    return shlex.split(args), script


def read_text(path: Path) -> str:
    """A small local file, read in one go (a test's log, not I/O on the server's loop)."""
    return path.read_text()


async def start_serve(args: list[str], cwd: Path, log: Path) -> tuple[asyncio.subprocess.Process, str]:
    """`agentos serve` with the README's arguments on an ephemeral port, from `cwd` (so its
    default `./data` is where a newcomer's would be: relative)."""
    with log.open("wb") as err:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "agentos",
            "serve",
            *args,
            "--port",
            "0",
            cwd=cwd,
            stdout=asyncio.subprocess.PIPE,
            stderr=err,
            env=child_env(),
        )
    assert proc.stdout is not None
    line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
    assert line.startswith("agentos listening on "), line + read_text(log)
    return proc, line.split()[-1]


async def run_script(script: str, cwd: Path) -> tuple[int | None, str, str]:
    proc = await asyncio.create_subprocess_exec(
        "bash",
        "-c",
        "set -euo pipefail\n" + script,
        cwd=cwd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=child_env(),
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), _SCRIPT_TIMEOUT_S)
    except TimeoutError:
        proc.kill()
        out, err = await proc.communicate()
        pytest.fail(f"the README's first run took over {_SCRIPT_TIMEOUT_S}s:\n{out.decode()}\n{err.decode()}")
    return proc.returncode, out.decode(), err.decode()


async def run_events(url: str, run_id: str) -> list[Event]:
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(timeout=timeout) as http, http.get(f"{url}/v1/runs/{run_id}/events") as r:
        assert r.status == 200, await r.text()
        return [e async for e in sse_events(r)]


async def stop(proc: asyncio.subprocess.Process) -> str:
    """SIGTERM, then the rest of its stdout (the log is in its stderr file)."""
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), 30)
    except TimeoutError:
        proc.kill()
        out, _ = await proc.communicate()
    return out.decode()


def assert_first_run(events: list[Event]) -> None:
    """Two commands approved and run, one question answered, then completed."""
    answered = [e.data for e in events if e.name == "human.answered"]
    kinds = [(a["kind"], a.get("approve")) for a in answered]
    assert kinds == [("approval", True), ("approval", True), ("question", None)]
    assert answered[-1]["answer"] == "yes"
    results = [e.data for e in events if e.name == "tool.result"]
    assert [r["name"] for r in results] == ["run_command", "run_command"]
    for result in results[:2]:
        assert msgspec.json.decode(result["content"])["exit_code"] == 0, result
    assert events[-1].name == "run.completed" and events[-1].data["result"], events[-1]


@dataclass(frozen=True)
class FirstRun:
    script_out: str
    events: list[Event]
    workspace: Path  # the run's working directory


async def first_run(tmp_path: Path) -> FirstRun:
    """Run the README's first run in `tmp_path`; check what every first run must show."""
    args, script = first_run_blocks(README.read_text())
    assert args == ["--mock-scenario", "tools"]  # the first run needs the mock that calls tools
    log = tmp_path / "serve.log"
    proc, url = await start_serve(args, tmp_path, log)
    try:
        code, out, err = await run_script(script.replace(_README_ADDRESS, url.removeprefix("http://")), tmp_path)
        assert code == 0, f"stdout:\n{out}\nstderr:\n{err}"
        final: dict[str, Any] = msgspec.json.decode(out.strip().splitlines()[-1])
        assert final["status"] == "completed", out
        assert "event: human.requested" in out and "event: run.completed" in out  # it was watched live
        assert '"error"' not in out and "Traceback" not in err, f"stdout:\n{out}\nstderr:\n{err}"
        events = await run_events(url, final["run_id"])
    finally:
        rest = await stop(proc)
    server_output = read_text(log) + rest
    assert "Traceback" not in server_output, server_output
    assert "scenario 'tools'" in server_output  # the built-in mock says which script it plays
    return FirstRun(out, events, tmp_path / "data" / "workspaces" / final["run_id"])


async def test_the_readme_first_run_works_as_written(tmp_path: Path) -> None:
    assert_first_run((await first_run(tmp_path)).events)


async def test_the_first_runs_commands_write_in_their_workspace(tmp_path: Path) -> None:
    """Issue #13 item 1 from the README's side: with the default relative ./data the approved
    commands write in their own workspace (Landlock's workspace rule was skipped before)."""
    run = await first_run(tmp_path)
    stderr = [msgspec.json.decode(e.data["content"])["stderr"] for e in run.events if e.name == "tool.result"]
    assert stderr == ["", ""]
    assert read_text(run.workspace / "effects.log") == "step-1\nstep-2\n"


async def test_the_mock_flags_and_env_reach_the_builtin_mock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--mock-*` flags and `AGENTOS_MOCK_SCENARIO` decide what the built-in mock answers."""
    monkeypatch.setenv("AGENTOS_MOCK_SCENARIO", "tools")
    flags = ["serve", "--data-dir", str(tmp_path), "--mock-tokens", "3", "--mock-ttft-ms", "0", "--mock-tps", "1000"]
    settings = settings_from_args(build_parser().parse_args(flags))
    assert settings.mock == MockConfig(scenario="tools", tokens=3, ttft_ms=0, tps=1000)
    async with builtin_mock(settings) as mocked, aiohttp.ClientSession() as http:
        ask = [{"role": "user", "content": "check the build"}]
        done = [*ask, *({"role": "tool", "tool_call_id": str(k), "content": "ok"} for k in range(3))]
        answers = []
        for messages in (ask, done):
            body = {"messages": messages, "tools": AGENT_TOOLS}  # an agent run's request: tools offered
            async with http.post(f"{mocked.provider.url}/chat/completions", json=body) as r:
                answers.append((await r.json())["choices"][0]["message"])
    assert answers[0]["tool_calls"][0]["function"]["name"] == "run_command"
    assert answers[1]["content"] == "tok " * 3
