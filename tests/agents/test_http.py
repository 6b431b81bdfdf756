"""The run routes over real HTTP, with the real provider client against the bench mock (`tools`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from agentos.agents.http import RUN_SERVICE, add_routes, error_middleware
from agentos.agents.service import RunService
from agentos.bench.mock.server import MockServer
from agentos.config import ProviderConfig, Settings
from agentos.providers.openai_compat import OpenAICompatProvider
from agentos.testing import Event, eventually, sse_events

AGENTS = {
    "ops": {"tools": ["run_command", "ask_human"]},
    "careful": {"tools": ["run_command", "ask_human"], "approval_required": ["run_command"]},
}


@dataclass
class Served:
    url: str
    service: RunService


@pytest.fixture
async def base_url(served: Served) -> str:
    return served.url


@pytest.fixture
async def served(tmp_path: Path, mock_factory: Callable[..., Awaitable[MockServer]]) -> AsyncIterator[Served]:
    mock = await mock_factory(scenario="tools")
    provider = OpenAICompatProvider(ProviderConfig(url=mock.url, model="mock-1"))
    service = RunService(provider, tmp_path / "data", Settings(agents=AGENTS))
    await service.start()
    app = web.Application(middlewares=[error_middleware])
    app[RUN_SERVICE] = service
    add_routes(app, RUN_SERVICE, keepalive_s=0.05)
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield Served(f"http://127.0.0.1:{runner.addresses[0][1]}", service)
    await runner.cleanup()
    await service.close()
    await provider.aclose()


async def read_events(http: aiohttp.ClientSession, url: str, until: str, last_id: str | None = None) -> list[Event]:
    headers = {"Last-Event-ID": last_id} if last_id else {}
    events: list[Event] = []
    async with http.get(url, headers=headers) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/event-stream")
        async for event in sse_events(response):
            events.append(event)
            if event.name == until:
                break
    return events


async def post(http: aiohttp.ClientSession, url: str, body: Any) -> tuple[int, Any]:
    async with http.post(url, json=body) as response:
        return response.status, await response.json()


async def test_full_loop_over_http(base_url: str, http: aiohttp.ClientSession, tmp_path: Path) -> None:
    status, started = await post(http, f"{base_url}/v1/agents/ops/runs", {"input": "tidy up", "session_id": "s1"})
    assert status == 202 and started["status"] == "queued"
    run_id = started["run_id"]
    events_url = f"{base_url}{started['events_url']}"
    first = await read_events(http, events_url, until="human.requested")
    names = [e.name for e in first if e.name != "token"]
    assert names == ["run.started", "tool.call", "tool.result", "tool.call", "tool.result", "human.requested"]
    request = first[-1].data
    assert request["question"] == "Proceed with the final answer?" and len(request["args_hash"]) == 64
    async with http.get(f"{base_url}/v1/runs/{run_id}") as response:
        info = await response.json()
    assert info["status"] == "waiting_human" and info["session_id"] == "s1"
    assert info["pending"]["operation_id"] == request["operation_id"]
    status, _ = await post(
        http, f"{base_url}/v1/runs/{run_id}/answer", {"operation_id": request["operation_id"], "answer": "yes"}
    )
    assert status == 200
    rest = await read_events(http, events_url, until="run.completed", last_id=first[-1].id)
    assert [e.name for e in rest if e.name != "token"] == ["human.answered", "run.completed"]
    ids = [int(e.id or 0) for e in first + rest if e.name != "token"]
    assert ids == list(range(1, len(ids) + 1))  # resumed exactly after Last-Event-ID
    assert rest[-1].data["result"]
    assert (tmp_path / "data" / "workspaces" / run_id / "effects.log").read_text() == "step-1\nstep-2\n"


async def test_approval_with_a_wrong_hash_is_refused(base_url: str, http: aiohttp.ClientSession) -> None:
    _, started = await post(http, f"{base_url}/v1/agents/careful/runs", {"input": "x"})
    run_url = f"{base_url}/v1/runs/{started['run_id']}"
    asked = (await read_events(http, f"{run_url}/events", until="human.requested"))[-1]
    request = asked.data
    assert request["kind"] == "approval" and request["tool"] == "run_command"
    op = request["operation_id"]
    status, body = await post(http, f"{run_url}/answer", {"operation_id": op, "approve": True, "args_hash": "f" * 64})
    assert status == 409 and body["error"]["code"] == "args_hash_mismatch"
    status, body = await post(http, f"{run_url}/answer", {"operation_id": op, "approve": True})
    assert status == 422
    status, body = await post(
        http, f"{run_url}/answer", {"operation_id": op, "approve": True, "args_hash": request["args_hash"]}
    )
    assert status == 200
    events = await read_events(http, f"{run_url}/events", until="human.requested", last_id=asked.id)
    assert [e.name for e in events] == ["human.answered", "tool.call", "tool.result", "human.requested"]
    assert events[-1].data["operation_id"] != op  # the next command needs its own approval


async def test_cancel_and_terminate_over_http(base_url: str, http: aiohttp.ClientSession) -> None:
    _, started = await post(http, f"{base_url}/v1/agents/ops/runs", {"input": "x"})
    run_url = f"{base_url}/v1/runs/{started['run_id']}"
    await read_events(http, f"{run_url}/events", until="human.requested")
    status, info = await post(http, f"{run_url}/terminate", None)
    assert status == 200 and info["status"] == "cancelled" and info["reason"] == "terminated"
    status, info = await post(http, f"{run_url}/cancel", None)
    assert status == 200 and info["status"] == "cancelled"
    events = await read_events(http, f"{run_url}/events", until="run.cancelled")
    assert events[-1].name == "run.cancelled"


async def test_agents_api(base_url: str, http: aiohttp.ClientSession) -> None:
    status, agent = await post(
        http, f"{base_url}/v1/agents", {"name": "helper", "max_turns": 3, "tools": ["ask_human"]}
    )
    assert status == 201 and agent["max_turns"] == 3 and agent["source"] == "api"
    async with http.get(f"{base_url}/v1/agents") as response:
        names = [a["name"] for a in (await response.json())["agents"]]
    assert names == ["careful", "helper", "ops"]
    async with http.get(f"{base_url}/v1/agents/helper") as response:
        assert (await response.json())["tools"] == ["ask_human"]
    status, body = await post(http, f"{base_url}/v1/agents", {"name": "ops"})
    assert status == 409


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "code"),
    [
        ("post", "/v1/agents", {"name": "x", "max_turns": 101}, 422, "invalid_input"),
        ("post", "/v1/agents", {"name": "x", "tools": ["rm_rf"]}, 422, "invalid_input"),
        ("post", "/v1/agents", b"{not json", 400, "malformed_json"),
        ("get", "/v1/agents/nope", None, 404, "agent_not_found"),
        ("post", "/v1/agents/nope/runs", {"input": "x"}, 404, "agent_not_found"),
        ("post", "/v1/agents/ops/runs", {"input": 3}, 422, "invalid_input"),
        ("post", "/v1/agents/ops/runs", {"input": ""}, 422, "invalid_input"),
        ("get", "/v1/runs/nope", None, 404, "run_not_found"),
        ("get", "/v1/runs/nope/events", None, 404, "run_not_found"),
        ("post", "/v1/runs/nope/cancel", None, 404, "run_not_found"),
        ("post", "/v1/runs/nope/answer", {"operation_id": "x"}, 404, "run_not_found"),
    ],
)
async def test_bad_requests(base_url: str, http: aiohttp.ClientSession, method: str, path: str, body: Any,
                            status: int, code: str) -> None:  # fmt: skip
    kwargs: dict[str, Any] = {"data": body} if isinstance(body, bytes) else {"json": body}
    async with http.request(method, f"{base_url}{path}", **kwargs) as response:
        assert response.status == status
        error = (await response.json())["error"]
        assert error["code"] == code and error["message"]


async def test_field_named_in_agent_errors(base_url: str, http: aiohttp.ClientSession) -> None:
    _, body = await post(http, f"{base_url}/v1/agents", {"name": "x", "max_turns": 101})
    assert body["error"]["message"].startswith("max_turns:")
    async with http.get(f"{base_url}/v1/runs/x/events", headers={"Last-Event-ID": "abc"}) as response:
        assert response.status == 400


async def test_an_idle_stream_gets_keepalive_comments(base_url: str, http: aiohttp.ClientSession) -> None:
    _, started = await post(http, f"{base_url}/v1/agents/ops/runs", {"input": "x"})
    events_url = f"{base_url}{started['events_url']}"
    asked = (await read_events(http, events_url, until="human.requested"))[-1]
    async with http.get(events_url, headers={"Last-Event-ID": asked.id or ""}) as response:
        first = await response.content.readuntil(b"\n\n")  # the run waits: nothing but comments
    assert first == b": keep-alive\n\n"


async def test_a_client_that_goes_away_leaves_no_subscriber(served: Served, http: aiohttp.ClientSession) -> None:
    _, started = await post(http, f"{served.url}/v1/agents/ops/runs", {"input": "x"})
    events_url = f"{served.url}{started['events_url']}"
    await read_events(http, events_url, until="human.requested")  # the client leaves after this event
    await eventually(lambda: served.service.statistics().subscribers == 0, what="the stream's subscription to go")
