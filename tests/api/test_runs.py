"""The agents and runs routes over real HTTP: the real app, its real RunService and SQLite
journal, the real provider client against the bench mock (`tools` scenario)."""

from __future__ import annotations

import asyncio
import itertools
import logging
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agentos.api.keys import RUNS, SSE_KEEPALIVE_S
from agentos.client import APIError, AsyncClient, RunEvent
from agentos.config import settings_from_dict
from agentos.mock.server import MockServer
from agentos.testing import Event, RunningServer, sse_events
from tests.api.helpers import assert_documented, expect_error, start_app

AGENTS = {
    "ops": {"tools": ["run_command", "ask_human"]},
    "careful": {"tools": ["run_command", "ask_human"], "approval_required": ["run_command"]},
}
MAX_BODY_BYTES = 4096
JSON = {"Content-Type": "application/json"}


@pytest.fixture
async def served(tmp_path: Path, mock_factory: Callable[..., Awaitable[MockServer]]) -> AsyncIterator[RunningServer]:
    mock = await mock_factory(scenario="tools")
    settings = settings_from_dict(
        {
            "data_dir": str(tmp_path / "data"),
            "provider": {"url": mock.url, "retry_budget_s": 2.0},
            "server": {"max_body_bytes": MAX_BODY_BYTES},
            "agents": AGENTS,
        }
    )
    server = await start_app(settings, lambda app: app.__setitem__(SSE_KEEPALIVE_S, 0.05))
    yield server
    await server.close()


@pytest.fixture
def base_url(served: RunningServer) -> str:
    return served.url


async def read_events(http: aiohttp.ClientSession, url: str, until: str) -> list[Event]:
    events: list[Event] = []
    async with http.get(url) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/event-stream")
        async for event in sse_events(response):
            events.append(event)
            if event.name == until:
                break
    return events


async def keepalives(stream: aiohttp.ClientResponse, count: int) -> None:
    """Read `count` keep-alive comments off an idle SSE stream (bounded: 5 s)."""
    async with asyncio.timeout(5):
        while count:
            line = await stream.content.readline()
            assert line, "the stream ended"
            count -= line.startswith(b": keep-alive")


async def until_event(events: AsyncIterator[Event], name: str) -> AsyncIterator[Event]:
    async with asyncio.timeout(10):
        async for event in events:
            yield event
            if event.name == name:
                return


async def post(http: aiohttp.ClientSession, url: str, body: Any) -> tuple[int, Any]:
    async with http.post(url, json=body) as response:
        return response.status, await response.json()


async def test_full_loop_over_http(base_url: str, http: aiohttp.ClientSession, tmp_path: Path) -> None:
    status, session = await post(http, f"{base_url}/v1/sessions", {})
    assert status == 201
    sid = session["id"]
    status, missing = await post(http, f"{base_url}/v1/agents/ops/runs", {"input": "x", "session_id": "ses_nope"})
    assert status == 404 and missing["error"]["code"] == "session_not_found"  # a run joins the caller's session
    status, started = await post(http, f"{base_url}/v1/agents/ops/runs", {"input": "tidy up", "session_id": sid})
    assert status == 202 and started["status"] == "queued"
    assert_documented(started, "RunStarted")
    run_id = started["run_id"]
    events_url = f"{base_url}{started['events_url']}"
    first = await read_events(http, events_url, until="human.requested")
    names = [e.name for e in first if e.name != "token"]
    model = ["model.started", "model.completed"]  # each model call, around the tool calls it asks for
    assert names == [
        "run.started",
        *model,
        "tool.call",
        "tool.result",
        *model,
        "tool.call",
        "tool.result",
        *model,
        "human.requested",
    ]
    request = first[-1].data
    assert request["question"] == "Proceed with the final answer?" and len(request["args_hash"]) == 64
    async with http.get(f"{base_url}/v1/runs/{run_id}") as response:
        info = await response.json()
    assert info["status"] == "waiting_human" and info["session_id"] == sid
    assert info["pending"]["operation_id"] == request["operation_id"]
    assert_documented(info, "Run")
    # Tokens are live only: subscribe before answering, so the final answer's tokens reach this stream.
    async with http.get(events_url, headers={"Last-Event-ID": str(first[-1].id)}) as stream:
        await keepalives(stream, 2)  # the second one comes after the server subscribed to the run
        status, answered = await post(
            http, f"{base_url}/v1/runs/{run_id}/answer", {"operation_id": request["operation_id"], "answer": "yes"}
        )
        assert status == 200
        assert_documented(answered, "Run")
        rest = [event async for event in until_event(sse_events(stream), "run.completed")]
    assert [e.name for e in rest if e.name != "token"] == ["human.answered", *model, "run.completed"]
    ids = [int(e.id or 0) for e in first + rest if e.name != "token"]
    assert ids == sorted(set(ids)) and ids[0] == 1  # resumed exactly after Last-Event-ID: no repeats
    assert any(e.name == "token" for e in first + rest)
    for before, token in itertools.pairwise(first + rest):
        if token.name == "token":  # live only: it has no id and leaves Last-Event-ID where it was
            assert token.id == before.id
    assert rest[-1].data["result"]
    assert (tmp_path / "data" / "workspaces" / run_id / "effects.log").read_text() == "step-1\nstep-2\n"


async def test_approval_with_a_wrong_hash_is_refused(base_url: str) -> None:
    async with AsyncClient(base_url) as client:
        run_id = (await client.start_run("careful", "x")).run_id
        asked = await next_request(client, run_id)
        request = asked.human_request()
        assert request.kind == "approval" and request.tool == "run_command"
        op = request.operation_id
        with pytest.raises(APIError) as wrong:
            await client.answer(run_id, op, approve=True, args_hash="f" * 64)
        assert (wrong.value.status, wrong.value.code) == (409, "args_hash_mismatch")
        with pytest.raises(APIError) as missing:
            await client.answer(run_id, op, approve=True)
        assert missing.value.status == 422
        await client.answer(run_id, op, approve=True, args_hash=request.args_hash)
        events: list[RunEvent] = []
        async with aclosing(client.run_events(run_id, after=asked.seq)) as stream:
            async for event in stream:
                events.append(event)
                if event.name == "human.requested":
                    break
    assert [e.name for e in events if e.name != "token"] == [
        "human.answered",
        "tool.call",
        "tool.result",
        "model.started",
        "model.completed",
        "human.requested",
    ]
    assert events[-1].data["operation_id"] != op  # the next command needs its own approval


async def next_request(client: AsyncClient, run_id: str) -> RunEvent:
    """The run's first `human.requested` event (the stream is closed after it)."""
    async with aclosing(client.run_events(run_id)) as stream:
        async for event in stream:
            if event.name == "human.requested":
                return event
    raise AssertionError(f"run {run_id} ended without asking")


async def test_cancel_and_terminate_over_http(base_url: str) -> None:
    async with AsyncClient(base_url) as client:
        run_id = (await client.start_run("ops", "x")).run_id
        await next_request(client, run_id)
        info = await client.terminate_run(run_id)
        assert info.status == "cancelled" and info.reason == "terminated"
        assert (await client.cancel_run(run_id)).status == "cancelled"
        events = [e async for e in client.run_events(run_id)]
    assert events[-1].name == "run.cancelled"


async def test_agents_api(base_url: str, http: aiohttp.ClientSession) -> None:
    status, agent = await post(
        http, f"{base_url}/v1/agents", {"name": "helper", "max_turns": 3, "tools": ["ask_human"]}
    )
    assert status == 201 and agent["max_turns"] == 3 and agent["source"] == "api"
    assert_documented(agent, "Agent")
    async with http.get(f"{base_url}/v1/agents") as response:
        listed = await response.json()
    assert_documented(listed, "AgentPage")
    assert [a["name"] for a in listed["data"]] == ["careful", "helper", "ops"]
    assert listed["next_cursor"] is None
    async with http.get(f"{base_url}/v1/agents/helper") as response:
        assert (await response.json())["tools"] == ["ask_human"]
    status, body = await post(http, f"{base_url}/v1/agents", {"name": "ops"})
    assert status == 409


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "code"),
    [
        ("post", "/v1/agents", {"name": "x", "max_turns": 101}, 422, "invalid_input"),
        ("post", "/v1/agents", {"name": "x", "tools": ["rm_rf"]}, 422, "invalid_input"),
        ("post", "/v1/agents", [1, 2], 422, "invalid_input"),
        ("post", "/v1/agents", b"{not json", 400, "malformed_json"),
        ("post", "/v1/agents", b"", 400, "malformed_json"),
        ("get", "/v1/agents/nope", None, 404, "agent_not_found"),
        ("post", "/v1/agents/nope/runs", {"input": "x"}, 404, "agent_not_found"),
        ("post", "/v1/agents/ops/runs", {"input": 3}, 422, "invalid_input"),
        ("post", "/v1/agents/ops/runs", {"input": ""}, 422, "invalid_input"),
        ("post", "/v1/agents/ops/runs", {"input": "x", "session_id": 5}, 422, "invalid_input"),
        ("post", "/v1/agents/ops/runs", {"input": "x", "extra": True}, 422, "invalid_input"),
        ("post", "/v1/agents/ops/runs", {}, 422, "invalid_input"),
        ("post", "/v1/agents/ops/runs", b'{"input": "x"', 400, "malformed_json"),
        ("post", "/v1/agents/ops/runs", b"\xff\xfe", 400, "malformed_json"),
        ("get", "/v1/runs/nope", None, 404, "run_not_found"),
        ("get", "/v1/runs/nope/events", None, 404, "run_not_found"),
        ("get", "/v1/runs/nope/events?after=-1", None, 400, "bad_request"),
        ("get", "/v1/runs/nope/events?after=x", None, 400, "bad_request"),
        ("post", "/v1/runs/nope/cancel", None, 404, "run_not_found"),
        ("post", "/v1/runs/nope/terminate", None, 404, "run_not_found"),
        ("post", "/v1/runs/nope/answer", {"operation_id": "x"}, 404, "run_not_found"),
        ("post", "/v1/runs/nope/answer", {"operation_id": 7}, 422, "invalid_input"),
        ("post", "/v1/runs/nope/answer", {"operation_id": "x", "approve": "yes"}, 422, "invalid_input"),
        ("post", "/v1/runs/nope/answer", b"[", 400, "malformed_json"),
        ("put", "/v1/runs/nope", None, 405, "method_not_allowed"),
    ],
)
async def test_bad_requests(
    base_url: str, http: aiohttp.ClientSession, method: str, path: str, body: Any, status: int, code: str
) -> None:
    kwargs: dict[str, Any] = {"data": body, "headers": JSON} if isinstance(body, bytes) else {"json": body}
    async with http.request(method, f"{base_url}{path}", **kwargs) as response:
        await expect_error(response, status, code)


@pytest.mark.parametrize("path", ["/v1/agents", "/v1/agents/ops/runs", "/v1/runs/nope/answer"])
async def test_a_body_over_the_limit_is_413(base_url: str, http: aiohttp.ClientSession, path: str) -> None:
    async with http.post(f"{base_url}{path}", json={"input": "x" * MAX_BODY_BYTES}) as response:
        await expect_error(response, 413, "payload_too_large")

    async def chunked() -> AsyncIterator[bytes]:  # no Content-Length: the limit must hold while reading
        for _ in range(10):
            yield b"x" * 1000

    async with http.post(f"{base_url}{path}", data=chunked(), headers=JSON) as response:
        await expect_error(response, 413, "payload_too_large")


async def test_field_named_in_agent_errors(base_url: str, http: aiohttp.ClientSession) -> None:
    _, body = await post(http, f"{base_url}/v1/agents", {"name": "x", "max_turns": 101})
    assert body["error"]["message"].startswith("max_turns:")
    async with http.get(f"{base_url}/v1/runs/x/events", headers={"Last-Event-ID": "abc"}) as response:
        await expect_error(response, 400, "bad_request")


async def test_an_idle_stream_gets_keepalive_comments(base_url: str, http: aiohttp.ClientSession) -> None:
    _, started = await post(http, f"{base_url}/v1/agents/ops/runs", {"input": "x"})
    events_url = f"{base_url}{started['events_url']}"
    asked = (await read_events(http, events_url, until="human.requested"))[-1]
    async with http.get(events_url, headers={"Last-Event-ID": asked.id or ""}) as response:
        first = await response.content.readuntil(b"\n\n")  # the run waits: nothing but comments
    assert first == b": keep-alive\n\n"


async def test_a_client_that_goes_away_leaves_no_subscriber(served: RunningServer, http: aiohttp.ClientSession) -> None:
    _, started = await post(http, f"{served.url}/v1/agents/ops/runs", {"input": "x"})
    events_url = f"{served.url}{started['events_url']}"
    await read_events(http, events_url, until="human.requested")  # the client leaves after this event
    assert await served.services.runs.wait_no_subscribers(5.0), "the stream's subscription stayed"
    assert served.app[RUNS].statistics().subscribers == 0


async def test_a_failure_mid_stream_is_an_event_not_a_broken_response(
    served: RunningServer, http: aiohttp.ClientSession, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A journal row that no longer decodes (a real corrupt file, the failure defect 3 names)
    fails the events stream after it started: the client gets the events before it, then one
    `error` event with an error id and a clean end; the log has the traceback under that id."""
    status, started = await post(http, f"{served.url}/v1/agents/ops/runs", {"input": "x"})
    run_url = f"{served.url}/v1/runs/{started['run_id']}"
    await read_events(http, f"{run_url}/events", until="human.requested")
    status, _ = await post(http, f"{run_url}/terminate", None)  # journaled before it answers
    assert status == 200
    await asyncio.to_thread(_corrupt_event, tmp_path / "data" / "runs.db", started["run_id"], seq=2)
    caplog.set_level(logging.ERROR)
    async with http.get(f"{run_url}/events") as response:
        assert response.status == 200
        events = [e async for e in sse_events(response)]  # to the end: a clean close, no payload error
    assert [e.name for e in events] == ["run.started", "error"]
    error = events[-1]
    assert error.id == events[0].id == "1"  # it has no id of its own: a reconnect resumes after seq 1
    assert error.data["code"] == "internal_error" and error.data["message"] == "internal server error"
    logged = [r for r in caplog.records if error.data["error_id"] in r.getMessage()]
    assert len(logged) == 1 and logged[0].exc_info is not None
    assert not [r for r in caplog.records if r.name == "aiohttp.server" or "unhandled" in r.getMessage()]


def _corrupt_event(db_path: Path, run_id: str, *, seq: int) -> None:
    with sqlite3.connect(db_path) as db:
        changed = db.execute(
            "UPDATE run_events SET data = 'not json' WHERE run_id = ? AND seq = ?", (run_id, seq)
        ).rowcount
    assert changed == 1


async def test_steer_delivers_a_message_to_a_working_run_at_its_next_step(
    base_url: str, http: aiohttp.ClientSession
) -> None:
    async with AsyncClient(base_url) as client:
        run_id = (await client.start_run("ops", "x")).run_id
        steer_url = f"{base_url}/v1/runs/{run_id}/steer"
        names: list[str] = []
        async with aclosing(client.run_events(run_id)) as stream:
            async for event in stream:
                names.append(event.name)
                if event.name == "tool.call" and "run.steered" not in names:
                    # answered once journaled: after this tool step, before the next model call
                    status, steered = await post(http, steer_url, {"input": "use blue"})
                    assert status == 200 and steered["run_id"] == run_id
                if event.name == "run.steered":
                    assert (event.data["input"], event.data["seq"]) == ("use blue", steered["seq"])
                if event.name == "human.requested":
                    status, refused = await post(http, steer_url, {"input": "later"})  # no task: refused
                    assert status == 409 and refused["error"]["code"] == "run_not_working"
                    await client.answer(run_id, event.human_request().operation_id, "yes")
        status, refused = await post(http, steer_url, {"input": "too late"})
        assert status == 409 and refused["error"]["code"] == "run_not_working"
    assert names[-1] == "run.completed" and names.count("run.steered") == 1
    steered_at = names.index("run.steered")
    assert names[steered_at - 1] == "tool.result" and names[steered_at + 1] == "model.started"
