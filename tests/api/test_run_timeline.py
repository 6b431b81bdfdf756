"""A run's timeline over HTTP: `GET /v1/runs/{id}/events` replays the model calls around the
tool calls and human requests, every journaled event with its time `at_ms`, and `GET
/v1/runs/{id}` (and the list) return the run's input.

The real server on each journal backend (`runs.db`, PostgreSQL), the real mock provider over
HTTP (`tools` scenario: two commands, a question, then the answer).
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agentos.agents.model_events import TEXT_MAX_CHARS
from agentos.config import settings_from_dict
from agentos.journal.run_list import INPUT_MAX_CHARS
from agentos.mock.server import MockServer
from agentos.testing import Event, sse_events
from tests.api.helpers import assert_documented, start_app
from tests.postgres import fresh_schema

AGENTS = {"ops": {"tools": ["run_command", "ask_human"]}, "chat": {"tools": []}}
MODEL = ["model.started", "model.completed"]
# The tools scenario's run, as its replay shows it: each model call around what it asked for.
TIMELINE = [
    "run.started",
    *MODEL,
    "tool.call",
    "tool.result",
    *MODEL,
    "tool.call",
    "tool.result",
    *MODEL,
    "human.requested",
    "human.answered",
    *MODEL,
    "run.completed",
]


class Api:
    def __init__(self, url: str, http: aiohttp.ClientSession, now_ms: Callable[[], int]) -> None:
        self.url = url
        self.http = http
        # The runs' clock (`at_ms`): on PostgreSQL the database's, as this node reads it, which may
        # stand a millisecond or so from this process's wall clock.
        self.now_ms = now_ms

    async def get(self, path: str, **params: str) -> Any:
        async with self.http.get(f"{self.url}{path}", params=params) as response:
            assert response.status == 200, await response.text()
            return await response.json()

    async def post(self, path: str, body: Any, status: int = 200) -> Any:
        async with self.http.post(f"{self.url}{path}", json=body) as response:
            assert response.status == status, await response.text()
            return await response.json()

    async def events(self, run_id: str, until: str, last_event_id: str | None = None) -> list[Event]:
        """The run's events (tokens too) up to the first `until`, after `last_event_id` if given."""
        headers = {} if last_event_id is None else {"Last-Event-ID": last_event_id}
        events: list[Event] = []
        async with self.http.get(f"{self.url}/v1/runs/{run_id}/events", headers=headers) as response:
            assert response.status == 200
            async for event in sse_events(response):  # the session's 30 s timeout bounds it
                events.append(event)
                if event.name == until:
                    return events
        raise AssertionError(f"run {run_id}: the stream ended without {until}: {[e.name for e in events]}")


@pytest.fixture(params=["sqlite", "postgres"])
async def api(
    request: pytest.FixtureRequest, tmp_path: Path, mock_factory: Callable[..., Awaitable[MockServer]]
) -> AsyncIterator[Api]:
    mock = await mock_factory(scenario="tools")
    config: dict[str, Any] = {
        "data_dir": str(tmp_path / "data"),
        "provider": {"url": mock.url, "retry_budget_s": 2.0},
        "agents": AGENTS,
    }
    async for store in fresh_schema() if request.param == "postgres" else _none():
        if store is not None:
            config["store"] = {
                "backend": "postgres",
                "postgres_url": store.postgres_url,
                "postgres_schema": store.postgres_schema,
            }
        server = await start_app(settings_from_dict(config))
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
                yield Api(server.url, http, server.services.runs.store.now_ms)
        finally:
            await server.close()


async def _none() -> AsyncIterator[None]:
    yield None


def journaled(events: list[Event]) -> list[Event]:
    return [e for e in events if e.name != "token"]


async def test_a_finished_runs_replay_is_its_timeline(api: Api) -> None:
    before_ms = api.now_ms()
    run_id = (await api.post("/v1/agents/ops/runs", {"input": "tidy up the logs"}, 202))["run_id"]
    first = await api.events(run_id, "human.requested")  # live, as the run works
    request = first[-1].data
    await api.post(f"/v1/runs/{run_id}/answer", {"operation_id": request["operation_id"], "answer": "yes"})
    rest = await api.events(run_id, "run.completed", last_event_id=first[-1].id)
    after_ms = api.now_ms()

    replay = await api.events(run_id, "run.completed")  # the finished run, from the journal
    assert [e.name for e in replay] == TIMELINE
    assert [e.id for e in replay] == [str(seq) for seq in range(1, len(TIMELINE) + 1)]
    assert journaled(first + rest) == replay  # what followers saw live is what the journal keeps, times too

    times = [e.data["at_ms"] for e in replay]
    assert all(isinstance(t, int) for t in times)
    assert before_ms <= times[0] and times[-1] <= after_ms and times == sorted(times)
    for earlier, started, completed in zip(replay, replay[1:], replay[2:], strict=False):
        if started.name == "model.started":
            check_model_call(earlier, started, completed)
    for completed, asked in itertools.pairwise(replay):  # what each reply asked for comes right after it
        if completed.name == "model.completed" and completed.data["tool_calls"]:
            assert [c["call_id"] for c in completed.data["tool_calls"]] == [asked.data["call_id"]]
            assert asked.name in ("tool.call", "human.requested")
    answer = replay[-2].data
    assert answer["tool_calls"] == [] and answer["finish_reason"] == "stop"
    assert answer["text"] == replay[-1].data["result"][:TEXT_MAX_CHARS] and answer["text_chars"] >= len(answer["text"])

    for resume_after in (1, 4, len(TIMELINE) - 1):  # Last-Event-ID: exactly the events after it
        tail = await api.events(run_id, "run.completed", last_event_id=str(resume_after))
        assert tail == replay[resume_after:]


def check_model_call(earlier: Event, started: Event, completed: Event) -> None:
    assert completed.name == "model.completed"
    assert started.data["operation_id"] == completed.data["operation_id"]
    assert started.data["attempt"] == 1  # no restart here: each call made once
    usage = completed.data["usage"]
    assert set(usage) == {"prompt_tokens", "completion_tokens"} and usage["prompt_tokens"] > 0
    # The call began after the event before it and ended by its completion's time.
    assert 0 <= completed.data["duration_ms"] <= completed.data["at_ms"] - earlier.data["at_ms"]


async def test_a_run_returns_its_input_and_the_list_a_bounded_part_of_it(api: Api) -> None:
    short, long = "count the words", "é" * (INPUT_MAX_CHARS + 7)  # characters, not bytes, on both backends
    runs = {}
    for text in (short, long):
        run_id = (await api.post("/v1/agents/chat/runs", {"input": text}, 202))["run_id"]
        await api.events(run_id, "run.completed")
        runs[text] = await api.get(f"/v1/runs/{run_id}")
        assert_documented(runs[text], "Run")
        assert (runs[text]["input"], runs[text]["input_truncated"]) == (text, False)
    listed = {run["run_id"]: run for run in (await api.get("/v1/runs"))["data"]}
    assert listed[runs[short]["run_id"]] == runs[short]  # as GET /v1/runs/{id} shows it
    cut = listed[runs[long]["run_id"]]
    assert (cut["input"], cut["input_truncated"]) == (long[:INPUT_MAX_CHARS], True)
    assert {**cut, "input": long, "input_truncated": False} == runs[long]
