"""A turn in a session with an agent is a run of that agent: the tool loop, streamed as the turn.

Real server, real mock in its `tools` scenario (two run_command calls, ask_human, an answer)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp

from agentos.client import AsyncClient
from agentos.config import settings_from_dict
from agentos.mock.server import MockServer, MockSettings, start_mock
from agentos.testing import Event, RunningServer, sse_events, start_server
from tests.api.helpers import SSE, new_session

OPS = {"tools": ["run_command", "ask_human"], "command": {"timeout_s": 10}}


async def start(tmp_path: Path, mock: MockServer) -> RunningServer:
    settings = settings_from_dict(
        {"data_dir": str(tmp_path / "data"), "provider": {"url": mock.url}, "agents": {"ops": OPS}}
    )
    return await start_server(settings)


async def test_a_session_turn_runs_its_agents_tool_loop(tmp_path: Path, mock_factory) -> None:
    mock: MockServer = await mock_factory(scenario="tools")
    server = await start(tmp_path, mock)
    try:
        async with AsyncClient(server.url) as client:
            sid = (await client.create_session(agent="ops")).session_id
            names: list[str] = []
            async for event in client.stream_turn(sid, "build it"):
                names.append(event.name)
                if event.name == "human.requested":
                    await client.answer(event.data["run_id"], event.human_request().operation_id, "yes")
            completed = event.data
            messages = (await client.messages(sid)).data
        assert names[0] == "turn.started" and names[-1] == "turn.completed"
        assert names.count("tool.call") == 2 and names.count("tool.result") == 2  # ask_human is a human.requested
        assert "human.requested" in names and "token" in names
        assert not [n for n in names if n.startswith("model.")]  # the run's timeline, not the turn's
        assert completed["result"] and completed["run_id"]
        assert [(m.role, m.status) for m in messages] == [("user", "completed"), ("assistant", "completed")]
        assert messages[1].content == completed["result"]
    finally:
        await server.close()


async def test_last_wins_terminates_the_run_behind_a_turn(tmp_path: Path, mock_factory, http) -> None:
    mock: MockServer = await mock_factory(scenario="tools")
    server = await start(tmp_path, mock)
    try:
        sid = await new_session(http, server.url, agent="ops")
        url = f"{server.url}/v1/sessions/{sid}/turns"
        first: list[Event] = []
        async with http.post(url, json={"input": "one"}, headers=SSE) as r:
            async for event in sse_events(r):
                first.append(event)
                if event.name == "human.requested":  # the run now waits for a human
                    second = asyncio.create_task(_post(http, url))
        assert first[-1].name == "turn.cancelled" and first[-1].data["reason"] == "superseded"
        async with http.get(f"{server.url}/v1/runs/{first[-1].data['run_id']}") as r:
            assert (await r.json())["status"] == "cancelled"
        second.cancel()
        await asyncio.gather(second, return_exceptions=True)
    finally:
        await server.close()


async def _post(http: aiohttp.ClientSession, url: str) -> None:
    async with http.post(url, json={"input": "two"}, headers=SSE) as r:
        async for _ in sse_events(r):
            pass


async def test_an_agent_named_default_runs_every_plain_session(tmp_path: Path, mock_factory, http) -> None:
    mock: MockServer = await mock_factory(scenario="tools")
    settings = settings_from_dict(
        {"data_dir": str(tmp_path / "data"), "provider": {"url": mock.url}, "agents": {"default": OPS}}
    )
    server = await start_server(settings)
    try:
        sid = await new_session(http, server.url)  # no agent named: "default"
        async with http.post(f"{server.url}/v1/sessions/{sid}/turns", json={"input": "x"}, headers=SSE) as r:
            async for event in sse_events(r):
                if event.name == "tool.call":
                    assert event.data["run_id"]
                    break
        server.runtime.cancel_turn("default", sid)
    finally:
        await server.close()


async def test_a_runs_model_sees_the_sessions_earlier_turns(tmp_path: Path, http) -> None:
    requests: list[list[dict[str, Any]]] = []
    mock = await start_mock(MockSettings(scenario="tools", ttft_ms=1, tps=5000), on_completed=requests.append)
    server = await start(tmp_path, mock)
    try:
        sid = await new_session(http, server.url, agent="ops")
        for text in ("first question", "second question"):
            await _answer_through(http, server.url, sid, text)
        second_run = [m for m in requests if any(x.get("content") == "second question" for x in m)]
        contents = [m.get("content") for m in second_run[0]]
        assert contents.index("first question") < contents.index("second question")
        assert any(m["role"] == "assistant" for m in second_run[0][: contents.index("second question")])
    finally:
        await server.close()
        await mock.close()


async def _answer_through(http: aiohttp.ClientSession, url: str, sid: str, text: str) -> None:
    async with http.post(f"{url}/v1/sessions/{sid}/turns", json={"input": text}, headers=SSE) as r:
        async for event in sse_events(r):
            if event.name == "human.requested":
                body = {"operation_id": event.data["operation_id"], "answer": "yes"}
                async with http.post(f"{url}/v1/runs/{event.data['run_id']}/answer", json=body) as a:
                    assert a.status == 200
            last = event
    assert last.name == "turn.completed"


async def test_runs_and_turns_share_the_provider_limit(tmp_path: Path, http) -> None:
    mock = await start_mock(MockSettings(scenario="tools", ttft_ms=30, tps=1000))
    settings = settings_from_dict(
        {
            "data_dir": str(tmp_path / "data"),
            "provider": {"url": mock.url},
            "kernel": {"concurrency_limit": 2},
            "agents": {"ops": OPS},
        }
    )
    server = await start_server(settings)
    try:
        sessions = [await new_session(http, server.url, agent="ops") for _ in range(3)]
        plain = [await new_session(http, server.url) for _ in range(3)]

        async def until_human(sid: str) -> str:
            async with http.post(f"{server.url}/v1/sessions/{sid}/turns", json={"input": "go"}, headers=SSE) as r:
                async for event in sse_events(r):
                    if event.name == "human.requested":
                        return event.name
            return "ended"

        async def plain_turn(sid: str) -> str:
            async with http.post(f"{server.url}/v1/sessions/{sid}/turns", json={"input": "hi"}) as r:
                status: str = (await r.json())["status"]
                return status

        results = await asyncio.gather(*map(until_human, sessions), *map(plain_turn, plain))
        assert results == ["human.requested"] * 3 + ["completed"] * 3
        assert mock.stats.max_concurrent == 2  # 9 model calls of runs and 3 of turns, never over 2
        assert server.runtime.kernel.statistics().permits_in_use == 0
    finally:
        await server.close()
        await mock.close()


def _rows_mentioning(db_path: Path, needle: str) -> list[tuple[str, str]]:
    import sqlite3

    found = []
    with sqlite3.connect(db_path) as db:
        for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
            for row in db.execute(f"SELECT * FROM {table}"):
                text = " ".join(v.decode(errors="replace") if isinstance(v, bytes) else str(v) for v in row)
                if needle in text:
                    found.append((table, text[:120]))
    return found


async def test_deleting_a_session_deletes_its_runs_journal_payloads_and_workspaces(
    tmp_path: Path, mock_factory, http
) -> None:
    """Defect 7 of issue 7: the transcript stayed in run context payloads, the run's events in the
    journal, its workspace on disk and its lines in the JSONL log."""
    mock: MockServer = await mock_factory(scenario="tools")
    settings = settings_from_dict(
        {
            "data_dir": str(tmp_path / "data"),
            "jsonl_dir": str(tmp_path / "jsonl"),
            "provider": {"url": mock.url},
            "agents": {"ops": OPS},
        }
    )
    server = await start_server(settings)
    secret = "zebra-transcript-4711"
    try:
        sid = await new_session(http, server.url, agent="ops")
        url = f"{server.url}/v1/sessions/{sid}/turns"
        run_ids = []
        for text in (f"{secret} first", f"{secret} second"):  # the second run's context holds the first
            async with http.post(url, json={"input": text}, headers=SSE) as r:
                async for event in sse_events(r):
                    if event.name == "human.requested":
                        run_ids.append(event.data["run_id"])
                        break  # leave the run waiting for its human; the next turn supersedes it
        workspaces = [tmp_path / "data" / "workspaces" / run_id for run_id in run_ids]
        assert all((w / "effects.log").exists() for w in workspaces)
        async with http.delete(f"{server.url}/v1/sessions/{sid}") as r:
            assert r.status == 204, await r.text()
        async with http.get(f"{server.url}/v1/runs/{run_ids[0]}") as r:
            assert r.status == 404
    finally:
        await server.close()
    assert not any(w.exists() for w in workspaces)
    for name in ("sessions.db", "events.db", "runs.db"):
        for needle in (sid, secret, *run_ids):
            assert _rows_mentioning(tmp_path / "data" / name, needle) == [], (name, needle)
    for path in (tmp_path / "jsonl").rglob("*"):
        if path.is_file():
            assert sid not in path.read_text() and secret not in path.read_text()


async def test_an_agent_turn_behind_a_plain_turn_gets_the_freed_permit(tmp_path: Path, mock_factory, http) -> None:
    """Defect 1 of issue 7 over HTTP: with one permit, the agent turn failed with
    provider_limit_timeout although the plain turn freed the permit long before."""
    mock: MockServer = await mock_factory(ttft_ms=500, tps=2000, tokens=2)
    settings = settings_from_dict(
        {
            "data_dir": str(tmp_path / "data"),
            "provider": {"url": mock.url},
            "kernel": {"concurrency_limit": 1, "permit_wait_timeout_s": 4},
            "agents": {"helper": {}},
        }
    )
    server = await start_server(settings)
    try:
        plain, agent = await new_session(http, server.url), await new_session(http, server.url, agent="helper")

        async def last_event(sid: str) -> str:
            async with http.post(f"{server.url}/v1/sessions/{sid}/turns", json={"input": "x"}, headers=SSE) as r:
                return [e async for e in sse_events(r)][-1].name

        first = asyncio.create_task(last_event(plain))
        await mock.stats.wait_for(lambda s: s.in_flight == 1, what="the plain turn to hold the permit")
        assert await last_event(agent) == "turn.completed"
        assert await first == "turn.completed"
    finally:
        await server.close()


async def test_steer_delivers_a_message_to_the_running_agent_at_its_next_step(
    tmp_path: Path, mock_factory, http
) -> None:
    """While the run waits for a human, a steered message waits in the session's queue; once the
    human answers, the run takes it in before its next model call, and its stream says so. (The
    mock's `tools` script counts tool messages since the last user message, so it starts over.)"""
    mock: MockServer = await mock_factory(scenario="tools")
    server = await start(tmp_path, mock)
    try:
        sid = await new_session(http, server.url, agent="ops")
        url = f"{server.url}/v1/sessions/{sid}/turns"
        names: list[str] = []
        steered: list[Event] = []
        queued = asyncio.Event()

        async def steer() -> None:
            body = {"input": "and use blue", "on_busy": "steer"}
            async with http.post(url, json=body, headers=SSE) as r:
                async for event in sse_events(r):
                    steered.append(event)
                    queued.set()

        async with AsyncClient(server.url) as client:
            async for event in client.stream_turn(sid, "build it"):
                names.append(event.name)
                if event.name == "human.requested":
                    if not queued.is_set():  # the first time only: the mock's script restarts after a user message
                        steering = asyncio.create_task(steer())
                        await queued.wait()
                    await client.answer(event.data["run_id"], event.human_request().operation_id, "yes")
                if event.name == "turn.steered":
                    assert event.data["input"] == "and use blue"
            completed = event.data
        await steering
        assert "turn.steered" in names and names[-1] == "turn.completed", (names, completed)
        assert names.index("turn.steered") > names.index("human.requested")
        assert [e.name for e in steered] == ["turn.queued", "turn.completed"]
        assert steered[-1].data["steered_into"] == completed["turn_id"]
        async with http.get(f"{server.url}/v1/sessions/{sid}/messages") as r:
            messages = (await r.json())["data"]
        assert [(m["role"], m["content"]) for m in messages][:2] == [("user", "build it"), ("user", "and use blue")]
        assert messages[-1]["role"] == "assistant" and messages[-1]["content"] == completed["result"]
        assert server.runtime.kernel.statistics().steered_total == 1
    finally:
        await server.close()


async def test_an_agents_on_busy_is_its_sessions_default(tmp_path: Path, mock_factory, http) -> None:
    mock: MockServer = await mock_factory(scenario="tools")
    settings = settings_from_dict(
        {
            "data_dir": str(tmp_path / "data"),
            "provider": {"url": mock.url},
            "agents": {"ops": OPS | {"on_busy": "reject"}},
        }
    )
    server = await start_server(settings)
    try:
        sid = await new_session(http, server.url, agent="ops")
        url = f"{server.url}/v1/sessions/{sid}/turns"
        async with AsyncClient(server.url) as client:
            async for event in client.stream_turn(sid, "build it"):
                if event.name == "human.requested":  # the run waits: its turn is still the session's
                    async with http.post(url, json={"input": "again"}) as r:
                        assert r.status == 409
                        assert (await r.json())["error"]["code"] == "turn_in_progress"
                    await client.answer(event.data["run_id"], event.human_request().operation_id, "yes")
        assert event.name == "turn.completed"
    finally:
        await server.close()


async def test_a_steer_sent_as_the_agent_turn_starts_is_delivered_too(tmp_path: Path, mock_factory, http) -> None:
    """A double text: the second message comes right after the first turn started, perhaps before
    its run exists; it is kept on the turn and offered to the run once it does."""
    mock: MockServer = await mock_factory(scenario="tools")
    server = await start(tmp_path, mock)
    try:
        sid = await new_session(http, server.url, agent="ops")
        url = f"{server.url}/v1/sessions/{sid}/turns"
        names: list[str] = []
        steering: asyncio.Task[Any] | None = None

        async def steer() -> Any:
            async with http.post(url, json={"input": "and use blue", "on_busy": "steer"}) as r:
                return await r.json()

        async with AsyncClient(server.url) as client:
            async for event in client.stream_turn(sid, "build it"):
                names.append(event.name)
                if event.name == "turn.started":
                    steering = asyncio.create_task(steer())
                if event.name == "human.requested":
                    await client.answer(event.data["run_id"], event.human_request().operation_id, "yes")
        assert steering is not None
        steered = await steering
        assert names.count("turn.steered") == 1 and names[-1] == "turn.completed", names
        assert steered["status"] == "completed" and steered["steered_into"] == event.data["turn_id"]
    finally:
        await server.close()
