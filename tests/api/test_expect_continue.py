"""`Expect: 100-continue` on a real socket (agentos.api.expect): the 100 comes only once a
handler reads the body, after every check; a refused request is answered and its connection
closed before the client has sent the body."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from agentos.api.body import read_body
from agentos.mock.server import MockServer
from agentos.testing import RunningServer
from tests.api.helpers import Connection, connections, error_of, start_app
from tests.conftest import make_settings

TOKEN = "expect-test-token"
JSON = b"Content-Type: application/json\r\n"
BODY = b'{"metadata": {"note": "sent after the 100"}}'


def head(path: bytes, length: int, extra: bytes = JSON, version: bytes = b"1.1") -> bytes:
    return b"POST %s HTTP/%s\r\nHost: 127.0.0.1\r\n%sContent-Length: %d\r\nExpect: 100-continue\r\n\r\n" % (
        path,
        version,
        extra,
        length,
    )


@pytest.fixture
async def open_server(server_factory: Callable[..., Awaitable[RunningServer]], mock: MockServer) -> RunningServer:
    return await server_factory(mock.url, **{"store.enabled": False})


@pytest.fixture
async def connect(open_server: RunningServer) -> AsyncIterator[Callable[[], Awaitable[Connection]]]:
    async with connections(open_server.url) as make:
        yield make


@pytest.mark.parametrize(
    ("request_head", "status", "code"),
    [
        (head(b"/v1/sessions", 100_000_000), 413, "payload_too_large"),
        (head(b"/v1/sessions", len(BODY), JSON + b"Origin: http://evil.example\r\n"), 403, "cross_origin"),
        (head(b"/v1/sessions", len(BODY), b"Content-Type: text/plain\r\n"), 415, "unsupported_media_type"),
        (head(b"/v1/no-such-route", len(BODY)), 404, "not_found"),
        (head(b"/v1/runs/run_missing/cancel", len(BODY)), 404, "run_not_found"),  # a route that reads no body
    ],
    ids=["too-large", "cross-origin", "not-json", "no-route", "body-not-read"],
)
async def test_a_refused_request_gets_its_answer_without_a_100_and_the_close(
    connect: Any, request_head: bytes, status: int, code: str
) -> None:
    connection = await connect()
    await connection.send(request_head)  # and never the body: the client waits for a 100
    answer = await connection.response()
    assert error_of(*answer) == (status, code)  # the first answer: no 100 before it
    assert answer[1]["connection"] == "close"
    assert await connection.closed()  # not waiting for a body that will not come


async def test_a_request_without_its_key_gets_a_401_before_the_body_is_sent(
    server_factory: Callable[..., Awaitable[RunningServer]], mock: MockServer
) -> None:
    server = await server_factory(mock.url, **{"store.enabled": False, "server.api_token": TOKEN})
    async with connections(server.url) as connect:
        connection = await connect()
        await connection.send(head(b"/v1/sessions", 100_000_000))
        answer = await connection.response()
        assert error_of(*answer) == (401, "unauthorized")
        assert answer[1]["connection"] == "close"
        assert await connection.closed()


@pytest.mark.parametrize(
    ("encoding", "body"),
    [(b"", BODY), (b"Content-Encoding: gzip\r\n", gzip.compress(BODY, mtime=0))],
    ids=["plain", "gzip"],
)
async def test_a_request_that_passes_the_checks_gets_a_100_then_its_answer(
    connect: Any, encoding: bytes, body: bytes
) -> None:
    connection = await connect()
    await connection.send(head(b"/v1/sessions", len(body), JSON + encoding))
    assert (await connection.response())[0] == 100
    await connection.send(body)
    status, headers, answer = await connection.response()
    assert status == 201, answer
    assert headers.get("connection") != "close"
    await connection.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")  # still kept alive
    assert (await connection.response())[0] == 200


async def test_an_http_1_0_request_gets_no_100(connect: Any) -> None:
    connection = await connect()
    await connection.send(head(b"/v1/sessions", len(BODY), version=b"1.0") + BODY)
    status, _, answer = await connection.response()
    assert status == 201, answer


async def test_aiohttp_client_with_expect100(open_server: RunningServer, http: aiohttp.ClientSession) -> None:
    async with http.post(f"{open_server.url}/v1/sessions", json={"metadata": {}}, expect100=True) as response:
        assert response.status == 201, await response.text()


async def test_the_body_deadline_starts_with_the_100(tmp_path: Path, mock: MockServer) -> None:
    """A handler's own work before it reads the body (here: until the test releases it) is not
    the client's time: the client sends nothing before the 100, so the body's deadline
    (`server.body_timeout_s`) runs from the 100, not from the handler's start."""
    released = asyncio.Event()

    async def slow_then_read(request: web.Request) -> web.Response:
        await released.wait()
        return web.json_response(await read_body(request, dict[str, Any]))

    body_s = 0.3
    settings = make_settings(tmp_path / "data", mock.url, **{"server.body_timeout_s": body_s, "store.enabled": False})
    server = await start_app(settings, lambda app: app.router.add_post("/test/slow-read", slow_then_read))
    try:
        async with connections(server.url) as connect:
            connection = await connect()
            await connection.send(head(b"/test/slow-read", len(BODY)))
            await asyncio.sleep(body_s * 3)  # the handler's work outlasts body_timeout_s
            released.set()
            assert (await connection.response())[0] == 100
            await connection.send(BODY)
            status, _, answer = await connection.response()
            assert status == 200, answer
    finally:
        await server.close()
