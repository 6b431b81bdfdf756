"""The WebSocket protocol as docs/api.md describes it: every refused frame is an error frame
with its code (and `retry_after_s` where HTTP would send `Retry-After`), the socket stays open,
and every turn ends with exactly one terminal event, with or without its `turn.started`."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from agentos.runtime.turn import TERMINAL_EVENTS
from agentos.testing import RunningServer
from tests.api.helpers import new_session


async def receive_until(ws: aiohttp.ClientWebSocketResponse, done: Any) -> list[dict[str, Any]]:
    """Frames until `done(frames)` holds."""
    frames: list[dict[str, Any]] = []
    while not done(frames):
        frames.append(await ws.receive_json(timeout=10))
    return frames


def ended(turns: int) -> Any:
    return lambda frames: sum(f["type"] in TERMINAL_EVENTS for f in frames) == turns


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        ("not json", "malformed_json"),
        ('{"type": "nope"}', "invalid_input"),
        ('{"type": "turn"}', "invalid_input"),
        ('{"type": "turn", "input": "  "}', "invalid_input"),
        ('{"type": "turn", "input": "x", "extra": 1}', "invalid_input"),
        ("[]", "invalid_input"),
    ],
)
async def test_a_refused_frame_is_an_error_frame(server: RunningServer, http, frame: str, code: str) -> None:
    sid = await new_session(http, server.url)
    async with http.ws_connect(f"{server.url}/v1/sessions/{sid}/ws") as ws:
        await ws.send_str(frame)
        error = await ws.receive_json(timeout=10)
        assert error["type"] == "error" and error["error"]["code"] == code and error["error"]["message"]
        await ws.send_json({"type": "turn", "input": "still open"})  # the socket goes on
        frames = await receive_until(ws, ended(1))
    assert [f["type"] for f in frames][0] == "turn.started" and frames[-1]["type"] == "turn.completed"


async def test_a_binary_frame_is_refused(server: RunningServer, http) -> None:
    sid = await new_session(http, server.url)
    async with http.ws_connect(f"{server.url}/v1/sessions/{sid}/ws") as ws:
        await ws.send_bytes(b'{"type": "cancel"}')
        error = await ws.receive_json(timeout=10)
    assert error == {"type": "error", "error": {"code": "unsupported_frame", "message": "send JSON text frames"}}


async def test_overloaded_says_when_to_retry(server_factory, mock_factory, http) -> None:
    slow = await mock_factory(ttft_ms=60_000)
    server: RunningServer = await server_factory(slow.url, **{"kernel.max_in_flight_turns": 1})
    busy, other = await new_session(http, server.url), await new_session(http, server.url)
    async with (
        http.ws_connect(f"{server.url}/v1/sessions/{busy}/ws") as first,
        http.ws_connect(f"{server.url}/v1/sessions/{other}/ws") as second,
    ):
        await first.send_json({"type": "turn", "input": "takes a minute"})
        assert (await first.receive_json(timeout=10))["type"] == "turn.started"
        await second.send_json({"type": "turn", "input": "no room"})
        error = (await second.receive_json(timeout=10))["error"]
        assert error["code"] == "overloaded" and isinstance(error["retry_after_s"], int) and error["retry_after_s"] >= 1
        await first.send_json({"type": "cancel"})
        frames = await receive_until(first, ended(1))
    assert frames[-1]["type"] == "turn.cancelled" and frames[-1]["data"]["reason"] == "cancelled"


async def test_every_turn_ends_once_with_or_without_turn_started(server: RunningServer, http) -> None:
    """Three turns sent back to back: the first two are superseded (last-wins), possibly before
    their turn.started was sent; a client keys on the turn id in each event's id and ends a turn on its terminal
    event whether or not it saw the turn start."""
    sid = await new_session(http, server.url)
    async with http.ws_connect(f"{server.url}/v1/sessions/{sid}/ws") as ws:
        for text in ("one", "two", "three"):
            await ws.send_json({"type": "turn", "input": text})
        frames = await receive_until(ws, ended(3))
    turns: dict[str, list[str]] = {}
    for frame in frames:
        turn_id, _, seq = frame["id"].rpartition(":")  # every event's id is <turn_id>:<seq>
        assert seq.isdigit() and frame["data"].get("turn_id", turn_id) == turn_id  # tokens carry no turn_id
        turns.setdefault(turn_id, []).append(frame["type"])
    outcomes = [events[-1] for events in turns.values()]
    assert outcomes == ["turn.cancelled", "turn.cancelled", "turn.completed"], turns
    for events in turns.values():
        assert sum(e in TERMINAL_EVENTS for e in events) == 1
        assert events[0] == "turn.started" or events == ["turn.cancelled"], events
    superseded = [f["data"]["reason"] for f in frames if f["type"] == "turn.cancelled"]
    assert superseded == ["superseded", "superseded"]


async def test_a_frame_over_the_body_limit_closes_the_socket(server_factory, mock, http) -> None:
    server: RunningServer = await server_factory(mock.url, **{"server.max_body_bytes": 1024})
    sid = await new_session(http, server.url)
    async with http.ws_connect(f"{server.url}/v1/sessions/{sid}/ws") as ws:
        await ws.send_json({"type": "turn", "input": "x" * 2000})
        message = await ws.receive(timeout=10)
        assert message.type is aiohttp.WSMsgType.CLOSE and message.data == aiohttp.WSCloseCode.MESSAGE_TOO_BIG


async def test_a_turn_for_a_deleted_session_is_an_error_frame(server: RunningServer, http) -> None:
    sid = await new_session(http, server.url)
    async with http.ws_connect(f"{server.url}/v1/sessions/{sid}/ws") as ws:
        async with http.delete(f"{server.url}/v1/sessions/{sid}") as r:
            assert r.status == 204
        await ws.send_json({"type": "turn", "input": "anyone there?"})
        error = await ws.receive_json(timeout=10)
    assert error["type"] == "error" and error["error"]["code"] == "session_not_found"
