"""Once a response has started (an event stream's status line and headers are on the wire, a
WebSocket is upgraded), a failure must never become an HTTP answer: aiohttp would write a second
`HTTP/1.1 500` into the middle of the stream. The error middleware ends the stream instead: an
`error` event then the end, or a WebSocket close 1011. No route of ours fails after its start on
purpose, so these tests give their own app routes that do."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import msgspec
import pytest
from aiohttp import WSCloseCode, web

from agentos.api.sse import SSEStream
from agentos.api.websocket import upgrade
from agentos.errors import InvalidInput
from agentos.mock.server import MockServer
from agentos.testing import RunningServer
from tests.api.helpers import start_app
from tests.api.test_hostile_requests import raw_request
from tests.conftest import make_settings

SECRET = "password=hunter2"


def add_failing_streams(app: web.Application) -> None:
    async def fails(request: web.Request) -> web.StreamResponse:
        stream = await SSEStream.open(request)
        await stream.send("1", "first", {"n": 1})
        if request.query.get("how") == "client":
            raise InvalidInput("a late client error")
        raise RuntimeError(SECRET)

    async def socket_fails(request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse()
        await upgrade(request, ws)
        await ws.send_str("hello")
        raise RuntimeError(SECRET)

    app.router.add_get("/test/stream", fails)
    app.router.add_get("/test/socket", socket_fails)


@pytest.fixture
async def app_server(tmp_path: Path, mock: MockServer) -> AsyncIterator[RunningServer]:
    server = await start_app(make_settings(tmp_path / "data", mock.url), add_failing_streams)
    yield server
    await server.close()


@pytest.mark.parametrize(("how", "code"), [("bug", "internal_error"), ("client", "invalid_input")])
async def test_a_stream_that_fails_after_it_started_ends_with_an_error_event(
    app_server: RunningServer, caplog: pytest.LogCaptureFixture, how: str, code: str
) -> None:
    caplog.set_level(logging.ERROR)
    request = f"GET /test/stream?how={how} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode()
    status, headers, body = await raw_request(app_server.url, request)  # read to EOF: the stream ended
    assert status == 200 and headers["content-type"] == "text/event-stream"
    assert b"HTTP/1." not in body and b"500" not in body  # one status line: none in the middle
    events = [e for e in body.decode().replace("\r\n", "\n").split("\n\n") if "event:" in e]
    assert "event: first" in events[0] and "event: error" in events[-1] and len(events) == 2, body
    data = msgspec.json.decode(events[-1].split("data: ", 1)[1].split("\n")[0])
    assert data["code"] == code and SECRET not in body.decode()
    if how == "bug":  # ours: logged with its traceback under the id the client got
        logged = [r for r in caplog.records if data["error_id"] in r.getMessage()]
        assert len(logged) == 1 and logged[0].exc_info is not None
    assert not [r for r in caplog.records if r.name.startswith("aiohttp")]


async def test_a_websocket_that_fails_after_the_upgrade_is_closed_1011(
    app_server: RunningServer, http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)
    async with http.ws_connect(f"{app_server.url}/test/socket") as ws:
        assert (await ws.receive(timeout=5)).data == "hello"
        closing = await ws.receive(timeout=5)
        assert closing.type is aiohttp.WSMsgType.CLOSE, closing
        assert ws.close_code == WSCloseCode.INTERNAL_ERROR
        assert isinstance(closing.extra, str) and closing.extra.startswith("err_") and SECRET not in closing.extra
    assert not [r for r in caplog.records if r.name.startswith("aiohttp")]
