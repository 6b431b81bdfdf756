"""Following a turn's events and resuming them on one node (the embedded default).

The real server on a loopback port, the real mock provider over HTTP at a slow token rate (so
a turn is mid-way while it is followed), real SQLite. Nothing sleeps: each step waits for the
events it needs.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest
from multidict import CIMultiDict

from agentos.config import settings_from_dict
from agentos.mock.server import MockServer
from agentos.testing import Event, RunningServer, sse_events
from agentos.testing.tenants import create_tenant_key
from tests.api.helpers import SSE, expect_error, new_session, start_app

TOKENS = 40


@pytest.fixture
async def slow(server_factory: Callable[..., Awaitable[RunningServer]], mock_factory: Any) -> RunningServer:
    mock: MockServer = await mock_factory(tps=40, tokens=TOKENS)  # about a second per turn
    return await server_factory(mock.url)


class PostedTurn:
    """A turn POSTed as SSE, read to its end in a task of its own."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.started = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    @property
    def turn_id(self) -> str:
        return str(self.events[0].data["turn_id"])

    async def read(self, http: aiohttp.ClientSession, url: str, session_id: str) -> None:
        async with http.post(f"{url}/v1/sessions/{session_id}/turns", json={"input": "go"}, headers=SSE) as r:
            assert r.status == 200, await r.text()
            async for event in sse_events(r):
                self.events.append(event)
                self.started.set()


async def post_turn(http: aiohttp.ClientSession, url: str, session_id: str) -> PostedTurn:
    posted = PostedTurn()
    posted.task = asyncio.create_task(posted.read(http, url, session_id))
    await asyncio.wait_for(posted.started.wait(), 10)
    return posted


@asynccontextmanager
async def follow(
    http: aiohttp.ClientSession,
    url: str,
    session_id: str,
    turn_id: str,
    headers: dict[str, str] | None = None,
    params: dict[str, str] | None = None,
) -> AsyncIterator[AsyncIterator[Event]]:
    path = f"{url}/v1/sessions/{session_id}/turns/{turn_id}/events"
    async with http.get(path, headers=headers or {}, params=params or {}) as r:
        assert r.status == 200, await r.text()
        assert r.headers["Content-Type"].startswith("text/event-stream")
        yield sse_events(r)


async def test_follow_then_resume_after_a_disconnect(slow: RunningServer, http: aiohttp.ClientSession) -> None:
    sid = await new_session(http, slow.url)
    posted = await post_turn(http, slow.url, sid)
    turn_id = posted.turn_id
    first: list[Event] = []
    async with follow(http, slow.url, sid, turn_id) as events:
        async for event in events:
            first.append(event)
            if len(first) == 4:
                break  # the client goes away mid-turn
    assert first[0] == Event("turn.started", f"{turn_id}:1", {"turn_id": turn_id, "session_id": sid})
    # tokens carry no id: the client's last event id stays on the stored event before them
    assert [(e.name, e.id) for e in first[1:]] == [("token", f"{turn_id}:1")] * 3
    assert posted.task is not None and not posted.task.done()  # still mid-way: the tokens were live

    async with follow(http, slow.url, sid, turn_id, {"Last-Event-ID": f"{turn_id}:1"}) as events:
        resumed = [e async for e in events]
    assert "turn.started" not in [e.name for e in resumed]  # not replayed: the client had it
    assert resumed[-1].name == "turn.completed" and resumed[-1].data["usage"]["completion_tokens"] == TOKENS
    await posted.task
    assert resumed[-1].id == posted.events[-1].id == f"{turn_id}:{TOKENS + 2}"
    assert 0 < len(resumed) - 1 < TOKENS  # tokens from the reconnect on, none replayed


async def test_a_finished_turn_replays_its_stored_events(slow: RunningServer, http: aiohttp.ClientSession) -> None:
    sid = await new_session(http, slow.url)
    posted = await post_turn(http, slow.url, sid)
    assert posted.task is not None
    await posted.task
    turn_id = posted.turn_id
    async with follow(http, slow.url, sid, turn_id) as events:
        replay = [e async for e in events]
    assert [(e.name, e.id) for e in replay] == [
        ("turn.started", f"{turn_id}:1"),
        ("turn.completed", f"{turn_id}:{TOKENS + 2}"),
    ]
    assert replay[-1].data == posted.events[-1].data
    # resuming after a token's id (the POST's stream numbers tokens too) gives what is left
    token_id = posted.events[5].id
    async with follow(http, slow.url, sid, turn_id, {"Last-Event-ID": str(token_id)}) as events:
        assert [e.name async for e in events] == ["turn.completed"]
    async with follow(http, slow.url, sid, turn_id, params={"after": str(TOKENS + 2)}) as events:
        assert [e async for e in events] == []  # nothing after the terminal event: the stream just ends


@pytest.mark.parametrize(
    "last_event_id",
    [
        "-1",
        "abc",
        "1.5",
        "99999999999999999999999",
        str(2**62 + 1),
        "turn_other:3",
        ":3",
        "٣",  # an Arabic-Indic digit: int() would take it
        "0x10",
        "1e3",
        "x" * 5000,
    ],
)
async def test_a_hostile_last_event_id_is_a_400(
    server: RunningServer, http: aiohttp.ClientSession, last_event_id: str
) -> None:
    sid = await new_session(http, server.url)
    async with http.post(f"{server.url}/v1/sessions/{sid}/turns", json={"input": "hi"}) as r:
        turn_id = (await r.json())["turn_id"]
    path = f"{server.url}/v1/sessions/{sid}/turns/{turn_id}/events"
    async with http.get(path, headers={"Last-Event-ID": last_event_id}) as r:
        await expect_error(r, 400, "bad_request")
    async with http.get(path, params={"after": last_event_id}) as r:
        await expect_error(r, 400, "bad_request")


async def test_a_resume_point_sent_twice_is_a_400(server: RunningServer, http: aiohttp.ClientSession) -> None:
    """Neither of two Last-Event-IDs (or two afters) is surely the client's: it was the first."""
    sid = await new_session(http, server.url)
    async with http.post(f"{server.url}/v1/sessions/{sid}/turns", json={"input": "hi"}) as r:
        turn_id = (await r.json())["turn_id"]
    path = f"{server.url}/v1/sessions/{sid}/turns/{turn_id}/events"
    twice = CIMultiDict([("Last-Event-ID", f"{turn_id}:1"), ("Last-Event-ID", f"{turn_id}:2")])
    async with http.get(path, headers=twice) as r:
        body = await expect_error(r, 400, "bad_request")
    assert "Last-Event-ID: send it once" in body["error"]["message"]
    async with http.get(path, params=[("after", "1"), ("after", "1")]) as r:
        await expect_error(r, 400, "bad_request")


async def test_unknown_turns_and_sessions_are_404(server: RunningServer, http: aiohttp.ClientSession) -> None:
    sid = await new_session(http, server.url)
    other = await new_session(http, server.url)
    async with http.post(f"{server.url}/v1/sessions/{sid}/turns", json={"input": "hi"}) as r:
        turn_id = (await r.json())["turn_id"]
    async with http.get(f"{server.url}/v1/sessions/{other}/turns/{turn_id}/events") as r:
        await expect_error(r, 404, "turn_not_found")  # a turn of another session
    async with http.get(f"{server.url}/v1/sessions/ses_nope/turns/{turn_id}/events") as r:
        await expect_error(r, 404, "session_not_found")


async def test_another_tenants_turn_is_a_404(tmp_path: Any, mock: MockServer, http: aiohttp.ClientSession) -> None:
    admin = "admin-token-for-the-tests"
    settings = settings_from_dict(
        {"data_dir": str(tmp_path / "data"), "provider": {"url": mock.url}, "server": {"api_token": admin}}
    )
    server = await start_app(settings)
    try:
        a = (await create_tenant_key(server.url, admin, tenant_id="acme")).headers
        b = (await create_tenant_key(server.url, admin, tenant_id="bravo")).headers
        async with http.post(f"{server.url}/v1/sessions", json={}, headers=a) as r:
            sid = (await r.json())["id"]
        async with http.post(f"{server.url}/v1/sessions/{sid}/turns", json={"input": "hi"}, headers=a) as r:
            turn_id = (await r.json())["turn_id"]
        path = f"{server.url}/v1/sessions/{sid}/turns/{turn_id}/events"
        async with http.get(path, headers=b) as r:
            theirs = await expect_error(r, 404, "session_not_found")
        async with http.get(path.replace(sid, "ses_0000"), headers=b) as r:
            missing = await expect_error(r, 404, "session_not_found")
        assert str(theirs).replace(sid, "ses_0000") == str(missing)  # exactly like a missing one
        async with http.get(path, headers=a) as r:  # the owner reads it
            assert r.status == 200
            assert [e.name async for e in sse_events(r)] == ["turn.started", "turn.completed"]
    finally:
        await server.close()


async def test_an_agent_turns_events_are_stored_and_replayed(
    tmp_path: Any, mock_factory: Any, http: aiohttp.ClientSession
) -> None:
    mock: MockServer = await mock_factory(scenario="tools")  # two run_command calls, then ask_human
    ops = {"tools": ["run_command", "ask_human"], "command": {"timeout_s": 10}}
    settings = settings_from_dict(
        {"data_dir": str(tmp_path / "data"), "provider": {"url": mock.url}, "agents": {"ops": ops}}
    )
    server = await start_app(settings)
    try:
        sid = await new_session(http, server.url, agent="ops")
        posted = await post_turn(http, server.url, sid)
        seen: list[Event] = []
        async with follow(http, server.url, sid, posted.turn_id) as events:
            async for event in events:
                seen.append(event)
                if event.name == "human.requested":  # the turn's run now waits for a human
                    answer = {"operation_id": event.data["operation_id"], "answer": "yes"}
                    async with http.post(f"{server.url}/v1/runs/{event.data['run_id']}/answer", json=answer) as r:
                        assert r.status == 200, await r.text()
        assert posted.task is not None
        await posted.task
        stored = [(e.name, e.id) for e in posted.events if e.name != "token"]
        assert [(e.name, e.id) for e in seen if e.name != "token"] == stored
        async with follow(http, server.url, sid, posted.turn_id) as events:  # after the end: all from the store
            assert [(e.name, e.id) async for e in events] == stored
        assert [name for name, _ in stored].count("tool.call") == 2
    finally:
        await server.close()
