"""examples/word_count, as its README runs it: its own config file, its MCP server started over
stdio from the example's folder, a run started over HTTP. The one stand-in is the model: a
scripted provider that calls the example's tool, since no real model runs in CI.

Not at the unit level on purpose: the example is documentation, and this test is what keeps
its copy-paste commands true (config fields, tool name, the server's code).
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType

import aiohttp
import pytest

from agentos.config import load_settings
from agentos.providers.base import ChatRequest, Completion
from agentos.services import open_services
from agentos.testing import Event, RunningServer, serve_services, sse_events
from tests.agents.fakes import ScriptedProvider, answer, call

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "word_count"
TEXT = "The quick brown fox\njumps over the lazy dog."
TERMINAL = {"run.completed", "run.failed", "run.cancelled"}


def example_module() -> ModuleType:
    """The example's server.py, imported under a name of its own (`server` is too common)."""
    spec = importlib.util.spec_from_file_location("word_count_example", EXAMPLE / "server.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def count_the_text(request: ChatRequest) -> Completion:
    """The model: call the example's tool, then answer with what it returned."""
    if request.messages[-1]["role"] == "tool":
        return answer(request.messages[-1]["content"])
    return call("text__count_words", {"text": TEXT})


@pytest.fixture
def in_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the README asks for: the example's folder as working directory, and `python3` meaning
    an interpreter that has `mcp` (an active virtual environment; here, the one running the tests)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python = bin_dir / "python3"
    python.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
    python.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.chdir(EXAMPLE)


@pytest.fixture
async def server(tmp_path: Path, in_example: None) -> AsyncIterator[tuple[RunningServer, ScriptedProvider]]:
    settings = load_settings(EXAMPLE / "agentos.toml", environ={}, overrides={"data_dir": str(tmp_path / "data")})
    provider = ScriptedProvider(count_the_text)
    running = await serve_services(await open_services(settings, provider=provider))
    yield running, provider
    await running.close()


async def run_events(url: str, agent: str, text: str) -> list[Event]:
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{url}/v1/agents/{agent}/runs", json={"input": text}) as r:
            assert r.status == 202, await r.text()
            events_url = (await r.json())["events_url"]
        async with http.get(f"{url}{events_url}") as r:
            assert r.status == 200, await r.text()
            events = []
            async for event in sse_events(r):
                events.append(event)
                if event.name in TERMINAL:
                    break
            return events


def test_the_example_function_is_plain_python() -> None:
    assert example_module().count_words(TEXT) == "9 words, 2 lines, 44 characters"


@pytest.mark.slow
async def test_an_agent_calls_the_example_tool(server: tuple[RunningServer, ScriptedProvider]) -> None:
    running, provider = server
    expected = example_module().count_words(TEXT)

    events = await run_events(running.url, "counter", "How many words are in my text?")

    offered = provider.requests[0].tools or []
    assert [t["function"]["name"] for t in offered] == ["text__count_words"]
    assert set(offered[0]["function"]["parameters"]["properties"]) == {"text"}
    results = [e.data for e in events if e.name == "tool.result"]
    assert [(r["name"], r["content"]) for r in results] == [("text__count_words", expected)]
    assert provider.requests[1].messages[-1] == {
        "role": "tool",
        "tool_call_id": "c1",
        "content": expected,
    }  # what the model received is the function's own output
    assert events[-1].name == "run.completed" and events[-1].data["result"] == expected
