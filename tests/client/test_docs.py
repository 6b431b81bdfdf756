"""The examples of docs/client.md run as written, against a real server (only the URL changed)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from agentos.testing import RunningServer

DOC = Path(__file__).resolve().parents[2] / "docs" / "client.md"
DOC_URL = "http://127.0.0.1:8080"


def example(heading: str) -> str:
    """The first Python block under the `## heading` of docs/client.md."""
    section = DOC.read_text().split(f"## {heading}\n", 1)[1]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found is not None and DOC_URL in found.group(1), heading
    return found.group(1)


def run(code: str, url: str) -> None:
    exec(compile(code.replace(DOC_URL, url), str(DOC), "exec"), {"__name__": "__docs__"})


async def test_the_first_agent_run_example(tools_server: RunningServer, capsys: pytest.CaptureFixture[str]) -> None:
    await asyncio.to_thread(run, example("A first agent run: approve a command, answer a question"), tools_server.url)
    out = capsys.readouterr().out
    assert out.count("approving run_command") == 2 and "question: Proceed with the final answer?" in out
    # 20 events: 4 model calls (started, completed), 3 requests and answers, 2 commands (call, result)
    assert "20 run.completed" in out and out.splitlines()[-1].startswith("completed tok")


async def test_the_streamed_turn_example(server: RunningServer, capsys: pytest.CaptureFixture[str]) -> None:
    await asyncio.to_thread(run, example("A streamed turn"), server.url)
    out = capsys.readouterr().out
    assert out.startswith("tok tok tok tok \n[turn.completed]")
    assert "user hello\nassistant tok tok tok tok \nuser and again, in one piece\n" in out


async def test_the_knowledge_example(server: RunningServer, capsys: pytest.CaptureFixture[str]) -> None:
    await asyncio.to_thread(run, example("Knowledge: a collection, a document, a query"), server.url)
    (line,) = capsys.readouterr().out.splitlines()
    assert line.endswith("Expenses Expenses are filed by the 5th of each month.")
