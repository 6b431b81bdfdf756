"""A second message while a turn runs (`on_busy`), end to end: the real server on a loopback
port, the real mock over HTTP, real SQLite; over SSE and over the WebSocket."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from agentos.kernel import TurnState
from agentos.mock.server import MockServer
from agentos.runtime.turn import TERMINAL_EVENTS
from agentos.testing import FakeClock, RunningServer, sse_events
from tests.api.helpers import SSE, expect_error, new_session
from tests.api.test_websocket import ended, receive_until


async def _stream(http: aiohttp.ClientSession, url: str, body: dict[str, Any], seen: asyncio.Event) -> list[Any]:
    """The events of a turn; `seen` is set once its first event arrived."""
    events = []
    async with http.post(url, json=body, headers=SSE) as r:
        assert r.status == 200, await r.text()
        async for event in sse_events(r):
            events.append(event)
            seen.set()
    return events


async def _running(http: aiohttp.ClientSession, url: str, text: str) -> tuple[asyncio.Task[list[Any]], str]:
    """Start a slow turn; return its task once its first token is out, and its id."""
    first_token = asyncio.Event()
    events: list[Any] = []

    async def run() -> list[Any]:
        async with http.post(url, json={"input": text}, headers=SSE) as r:
            async for event in sse_events(r):
                events.append(event)
                if event.name == "token":
                    first_token.set()
        return events

    task = asyncio.create_task(run())
    await first_token.wait()
    return task, events[0].data["turn_id"]


async def _session(
    server_factory, mock_factory, http: aiohttp.ClientSession, *, tps: int = 200, tokens: int = 100, **settings: Any
) -> tuple[MockServer, RunningServer, str]:
    """A server on a mock slow enough to send a second message into (its turns last `tokens / tps`
    seconds), one session on it, and the URL of its turns."""
    mock: MockServer = await mock_factory(ttft_ms=5, tps=tps, tokens=tokens)
    server: RunningServer = await server_factory(mock.url, **settings)
    sid = await new_session(http, server.url)
    return mock, server, f"{server.url}/v1/sessions/{sid}/turns"


async def test_reject_answers_409_with_the_running_turn_and_leaves_it_alone(
    server_factory, mock_factory, http: aiohttp.ClientSession
) -> None:
    mock, server, url = await _session(server_factory, mock_factory, http, tps=200, tokens=100)
    first, first_id = await _running(http, url, "one")
    async with http.post(url, json={"input": "two", "on_busy": "reject"}) as r:
        assert r.status == 409
        error = (await r.json())["error"]
    assert error == {"code": "turn_in_progress", "message": error["message"], "turn_id": first_id}
    assert first_id in error["message"]
    events = await first
    assert events[-1].name == "turn.completed"  # untouched


async def test_enqueue_runs_the_turns_in_order_after_the_running_one(
    server_factory, mock_factory, http: aiohttp.ClientSession
) -> None:
    mock, server, url = await _session(
        server_factory, mock_factory, http, tps=400, tokens=60, **{"kernel.max_queued_turns_per_session": 2}
    )
    first, _ = await _running(http, url, "one")
    queued_two, queued_three = asyncio.Event(), asyncio.Event()
    two = asyncio.create_task(_stream(http, url, {"input": "two", "on_busy": "enqueue"}, queued_two))
    await queued_two.wait()
    three = asyncio.create_task(_stream(http, url, {"input": "three", "on_busy": "enqueue"}, queued_three))
    await queued_three.wait()
    async with http.post(url, json={"input": "four", "on_busy": "enqueue"}) as r:  # over the bound
        await expect_error(r, 429, "turn_queue_full")
        assert r.headers["Retry-After"] == "1"
    one_events, two_events, three_events = await first, await two, await three
    assert one_events[-1].name == "turn.completed"
    assert [e.name for e in two_events][:2] == ["turn.queued", "turn.started"]
    assert two_events[0].data["ahead"] == 0 and three_events[0].data["ahead"] == 1
    assert two_events[-1].name == three_events[-1].name == "turn.completed"
    assert mock.stats.aborted == 0  # nothing was cancelled
    async with http.get(url.replace("/turns", "/messages")) as r:
        messages = (await r.json())["data"]
    assert [(m["role"], m["content"]) for m in messages if m["role"] == "user"] == [
        ("user", "one"),
        ("user", "two"),
        ("user", "three"),
    ]
    assert [m["role"] for m in messages] == ["user", "assistant"] * 3  # one after the other
    async with http.get(f"{server.url}/metrics") as r:
        metrics = await r.text()
    assert "agentos_turns_queued_total 2.0" in metrics and "agentos_turns_refused_busy_total 1.0" in metrics
    assert "agentos_queued_turns 0.0" in metrics


async def test_a_queued_turn_is_cancelled_by_its_id(server_factory, mock_factory, http: aiohttp.ClientSession) -> None:
    mock, server, url = await _session(server_factory, mock_factory, http, tps=200, tokens=100)
    first, _ = await _running(http, url, "one")
    queued = asyncio.Event()
    two = asyncio.create_task(_stream(http, url, {"input": "two", "on_busy": "enqueue"}, queued))
    await queued.wait()
    (queued_id,) = [t for t in server.runtime.live_turns if server.runtime.kernel.turn_state(t) is TurnState.QUEUED]
    async with http.delete(f"{url}/{queued_id}") as r:
        assert await r.json() == {"cancelled": True, "turn_id": queued_id}
    events = await two
    assert [e.name for e in events] == ["turn.queued", "turn.cancelled"]
    assert events[-1].data["reason"] == "cancelled"
    assert (await first)[-1].name == "turn.completed"
    async with http.get(url.replace("/turns", "/messages")) as r:
        assert [m["content"] for m in (await r.json())["data"] if m["role"] == "user"] == ["one"]


async def test_steer_on_a_chat_turn_replaces_it(server_factory, mock_factory, http: aiohttp.ClientSession) -> None:
    mock, server, url = await _session(server_factory, mock_factory, http, tps=200, tokens=100)
    first, _ = await _running(http, url, "one")
    async with http.post(url, json={"input": "two", "on_busy": "steer"}) as r:
        assert (await r.json())["status"] == "completed"
    events = await first
    assert events[-1].name == "turn.cancelled" and events[-1].data["reason"] == "superseded"


async def test_a_session_without_a_strategy_keeps_last_wins(
    server_factory, mock_factory, http: aiohttp.ClientSession
) -> None:
    mock, server, url = await _session(server_factory, mock_factory, http, tps=200, tokens=100)
    first, _ = await _running(http, url, "one")
    async with http.post(url, json={"input": "two", "on_busy": None}) as r:
        assert (await r.json())["status"] == "completed"
    assert (await first)[-1].data["reason"] == "superseded"


async def test_an_unknown_strategy_is_422(server: RunningServer, http: aiohttp.ClientSession) -> None:
    sid = await new_session(http, server.url)
    async with http.post(f"{server.url}/v1/sessions/{sid}/turns", json={"input": "x", "on_busy": "wait"}) as r:
        await expect_error(r, 422, "invalid_input")


async def test_reject_and_enqueue_over_the_websocket(server_factory, mock_factory, http: aiohttp.ClientSession) -> None:
    mock: MockServer = await mock_factory(ttft_ms=5, tps=200, tokens=60)
    server: RunningServer = await server_factory(mock.url)
    sid = await new_session(http, server.url)
    async with http.ws_connect(f"{server.url}/v1/sessions/{sid}/ws") as ws:
        await ws.send_json({"type": "turn", "input": "one"})
        frames = await receive_until(ws, lambda fs: any(f["type"] == "token" for f in fs))
        first_id = frames[0]["data"]["turn_id"]
        await ws.send_json({"type": "turn", "input": "two", "on_busy": "reject"})
        frames += await receive_until(ws, lambda fs: any(f["type"] == "error" for f in fs))
        error = next(f for f in frames if f["type"] == "error")["error"]
        assert error["code"] == "turn_in_progress" and error["turn_id"] == first_id
        await ws.send_json({"type": "turn", "input": "three", "on_busy": "enqueue"})
        frames += await receive_until(ws, ended(2))
    kinds = [(f["type"], f["data"].get("turn_id")) for f in frames if f["type"] != "token" and f["type"] != "error"]
    assert kinds[0] == ("turn.started", first_id)
    names = [k for k, _ in kinds]
    assert names.index("turn.queued") < names.index("turn.completed") < len(names) - 1
    assert names[-1] == "turn.completed" and names.count("turn.completed") == 2
    assert mock.stats.aborted == 0


async def test_on_busy_at_the_openai_front_door(server_factory, mock_factory, http: aiohttp.ClientSession) -> None:
    """`on_busy` is an extension field of chat completions: it acts on the session the
    X-Session-Id header names."""
    mock: MockServer = await mock_factory(ttft_ms=5, tps=200, tokens=60)
    server: RunningServer = await server_factory(mock.url)
    chat = f"{server.url}/v1/chat/completions"
    hi = [{"role": "user", "content": "hi"}]
    async with http.post(chat, json={"model": "mock-1", "messages": hi}) as r:
        session = {"X-Session-Id": r.headers["X-Session-Id"]}
    first, first_id = await _running(http, f"{server.url}/v1/sessions/{session['X-Session-Id']}/turns", "one")
    body = {"model": "mock-1", "messages": hi, "on_busy": "reject"}
    async with http.post(chat, json=body, headers=session) as r:
        assert r.status == 409
        error = (await r.json())["error"]
    assert error["code"] == "turn_in_progress" and first_id in error["message"]
    async with http.post(chat, json=body | {"on_busy": "enqueue"}, headers=session) as r:
        assert r.status == 200
        assert (await r.json())["choices"][0]["message"]["content"]
    assert (await first)[-1].name == "turn.completed"  # the queued one ran after it


async def test_rollback_removes_the_replaced_turn_from_the_transcript(
    server_factory, mock_factory, http: aiohttp.ClientSession
) -> None:
    mock, server, url = await _session(server_factory, mock_factory, http, tps=200, tokens=100)
    first, _ = await _running(http, url, "one two three four five")
    async with http.post(url, json={"input": "six", "on_busy": "rollback"}) as r:
        rolled = await r.json()
    events = await first
    assert events[-1].name == "turn.cancelled" and events[-1].data["reason"] == "superseded"
    async with http.get(url.replace("/turns", "/messages")) as r:
        messages = (await r.json())["data"]
    assert [(m["role"], m["content"], m["status"]) for m in messages] == [
        ("user", "six", "completed"),
        ("assistant", rolled["output"], "completed"),
    ]
    alone = await new_session(http, server.url)
    async with http.post(f"{server.url}/v1/sessions/{alone}/turns", json={"input": "six"}) as r:
        fresh = await r.json()
    # the model never saw the rolled-back question: the same prompt as a first turn
    assert rolled["usage"]["prompt_tokens"] == fresh["usage"]["prompt_tokens"]


async def test_a_session_default_applies_to_turns_without_their_own(
    server_factory, mock_factory, http: aiohttp.ClientSession
) -> None:
    mock: MockServer = await mock_factory(ttft_ms=5, tps=200, tokens=60)
    clock = FakeClock()  # the kernel's: the session's TTL passes when the test says so
    server: RunningServer = await server_factory(mock.url, clock=clock)
    async with http.post(f"{server.url}/v1/sessions", json={"on_busy": "reject"}) as r:
        session = await r.json()
    assert session["on_busy"] == "reject"
    url = f"{server.url}/v1/sessions/{session['id']}/turns"
    first, first_id = await _running(http, url, "one")
    async with http.post(url, json={"input": "two"}) as r:
        assert r.status == 409 and (await r.json())["error"]["turn_id"] == first_id
    async with http.post(url, json={"input": "three", "on_busy": "enqueue"}) as r:  # the turn's own wins
        assert (await r.json())["status"] == "completed"
    assert (await first)[-1].name == "turn.completed"
    assert await server.runtime.wait_idle(5.0)
    clock.advance(301)  # idle past its TTL: evicted, read back from the store next time
    server.runtime.driver.tick()
    assert not server.runtime.kernel.has_session(session["id"])
    async with http.get(f"{server.url}/v1/sessions/{session['id']}") as r:
        assert (await r.json())["on_busy"] == "reject"
    again, _ = await _running(http, url, "four")
    async with http.post(url, json={"input": "five"}) as r:
        assert r.status == 409
    await again


def _streaming(frames: list[dict[str, Any]]) -> bool:
    """A token came after the latest turn.started: that turn is streaming."""
    names = [f["type"] for f in frames]
    return "turn.started" in names and "token" in names[len(names) - names[::-1].index("turn.started") :]


async def test_rollback_and_steer_over_the_websocket(server_factory, mock_factory, http: aiohttp.ClientSession) -> None:
    """On a chat session: steer replaces (there is no agent to steer), rollback replaces and the
    replaced turn leaves the transcript; every turn ends with one terminal frame."""
    mock, server, url = await _session(server_factory, mock_factory, http, tps=200, tokens=100)
    async with http.ws_connect(url.replace("/turns", "/ws")) as ws:
        await ws.send_json({"type": "turn", "input": "one"})
        frames = await receive_until(ws, lambda fs: any(f["type"] == "token" for f in fs))
        await ws.send_json({"type": "turn", "input": "two", "on_busy": "steer"})
        frames += await receive_until(ws, lambda fs: ended(1)(fs) and _streaming(fs))  # "one" ended, "two" streams
        await ws.send_json({"type": "turn", "input": "three", "on_busy": "rollback"})
        frames += await receive_until(ws, ended(2))
    ends = [(f["type"], f["data"].get("reason")) for f in frames if f["type"] in TERMINAL_EVENTS]
    assert ends == [("turn.cancelled", "superseded"), ("turn.cancelled", "superseded"), ("turn.completed", None)]
    async with http.get(url.replace("/turns", "/messages")) as r:
        messages = (await r.json())["data"]
    assert [(m["content"], m["status"]) for m in messages if m["role"] == "user"] == [
        ("one", "completed"),
        ("three", "completed"),
    ]  # "two" was rolled back; "one" was replaced and kept, its partial answer marked cancelled
    assert [m["status"] for m in messages if m["role"] == "assistant"] == ["cancelled", "completed"]
