"""Hostile connections on a real socket: a head or a body sent too slowly, too many connections
from one address, requests aiohttp's parser refuses (agentos.api.connections)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import msgspec
import pytest

from agentos.api.connections import GuardedServer
from agentos.mock.server import MockServer
from agentos.testing import RunningServer, eventually
from tests.api.helpers import Connection, connections, error_of, new_session, turn_events

HEAD_S = BODY_S = 0.3
LIMIT = 4


@pytest.fixture
async def connect(guarded: RunningServer) -> AsyncIterator[Callable[[], Awaitable[Connection]]]:
    async with connections(guarded.url) as make:
        yield make


@pytest.fixture
async def guarded(server_factory: Callable[..., Awaitable[RunningServer]], mock: MockServer) -> RunningServer:
    return await server_factory(
        mock.url,
        **{
            "server.header_timeout_s": HEAD_S,
            "server.body_timeout_s": BODY_S,
            "server.body_min_rate_bytes_s": 100,
            "server.max_connections_per_client": LIMIT,
            "store.enabled": False,  # nothing here is stored: a faster start
        },
    )


def closes(server: RunningServer, reason: str) -> float:
    value = server.services.metrics.registry.get_sample_value("agentos_connections_closed_total", {"reason": reason})
    assert value is not None
    return value


GET = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


async def test_a_head_sent_too_slowly_gets_a_408_and_the_close(guarded: RunningServer, connect: Any) -> None:
    loop = asyncio.get_running_loop()
    connection = await connect()
    started = loop.time()
    await connection.send(b"GET /healthz HTTP/1.1\r\nHost: te")
    assert error_of(*await connection.response()) == (408, "request_timeout")
    assert await connection.closed()
    assert loop.time() - started >= HEAD_S - 0.05
    assert closes(guarded, "header_timeout") == 1


async def test_a_connection_that_sends_nothing_is_closed_without_an_answer(
    guarded: RunningServer, connect: Any
) -> None:
    connection = await connect()
    assert await connection.closed()
    assert closes(guarded, "header_timeout") == 1


async def test_a_kept_alive_connection_may_idle_and_its_next_head_is_timed_from_its_first_byte(
    guarded: RunningServer, connect: Any
) -> None:
    connection = await connect()
    await connection.send(GET)
    assert (await connection.response())[0] == 200
    await asyncio.sleep(HEAD_S * 2)  # the client idles past the head deadline: keepalive_timeout_s rules that
    await connection.send(GET)
    assert (await connection.response())[0] == 200
    await connection.send(b"GET /healthz HTTP/1.1\r\n")
    assert error_of(*await connection.response()) == (408, "request_timeout")
    assert await connection.closed()
    assert closes(guarded, "header_timeout") == 1


def _post(body_length: int) -> bytes:
    return (
        b"POST /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % body_length
    )


async def test_a_body_sent_too_slowly_gets_a_408_and_the_close(guarded: RunningServer, connect: Any) -> None:
    connection = await connect()
    await connection.send(_post(100) + b"{")
    assert error_of(*await connection.response()) == (408, "request_timeout")
    assert await connection.closed()
    assert closes(guarded, "body_timeout") == 1


async def test_a_body_that_keeps_coming_at_the_minimum_rate_is_read_whole(guarded: RunningServer, connect: Any) -> None:
    body = msgspec.json.encode({"metadata": {"note": "x" * 200}})
    connection = await connect()
    await connection.send(_post(len(body)) + body[:-1])  # 200+ bytes at 100 B/s earn 2 s more
    await asyncio.sleep(BODY_S * 2)  # a slow client: past body_timeout_s, within what it earned
    await connection.send(body[-1:])
    status, _, answer = await connection.response()
    assert status == 201, answer
    assert closes(guarded, "body_timeout") == 0


async def test_an_event_stream_outlives_both_deadlines(
    mock_factory: Callable[..., Awaitable[MockServer]],
    server_factory: Callable[..., Awaitable[RunningServer]],
    http: aiohttp.ClientSession,
) -> None:
    slow = await mock_factory(ttft_ms=800)
    timeouts = {"server.header_timeout_s": HEAD_S, "server.body_timeout_s": BODY_S, "store.enabled": False}
    server = await server_factory(slow.url, **timeouts)
    loop = asyncio.get_running_loop()
    started = loop.time()
    events = await turn_events(http, server.url, await new_session(http, server.url))
    assert events[-1].name == "turn.completed"
    assert loop.time() - started > 0.8 > HEAD_S + BODY_S
    assert closes(server, "header_timeout") == closes(server, "body_timeout") == 0


async def test_connections_over_the_per_client_bound_are_refused_with_a_429(
    guarded: RunningServer, connect: Any
) -> None:
    held = [await connect() for _ in range(LIMIT)]
    for connection in held:  # answered: the server has counted each
        await connection.send(GET)
        assert (await connection.response())[0] == 200
    extra = await connect()
    await extra.send(GET)  # at once, as a client does: unread when the server refuses (no reset for it)
    assert error_of(*await extra.response()) == (429, "too_many_connections")
    assert await extra.closed()
    assert closes(guarded, "per_client_limit") == 1

    held[0].writer.close()
    assert guarded.runner.server is not None and isinstance(guarded.runner.server, GuardedServer)
    per_client = guarded.runner.server.guard.per_client
    await eventually(lambda: per_client.get("127.0.0.1") == LIMIT - 1, what="the closed connection released")
    again = await connect()
    await again.send(GET)
    assert (await again.response())[0] == 200


def _post_with(header: bytes) -> bytes:
    return b"POST /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" + header + b"\r\n\r\n"


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"GARBAGE\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nbad header\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX: " + b"a" * 9000 + b"\r\n\r\n", 431),
        (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n", 431),
        (b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"".join(b"X%d: 1\r\n" % i for i in range(200)) + b"\r\n", 400),
        (b"GET / HTTP/1.1\r\n\r\n", 400),  # no Host
        (b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03", 400),  # TLS on the HTTP port
        (b"POST /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: x\r\n\r\n", 400),
        (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 400),  # HTTP/2 spoken to an HTTP/1 port
        (b"GET /healthz HTTP/1.2\r\nHost: 127.0.0.1\r\n\r\n", 400),
        (b"get /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400),
        (b"GET /healthz HTTP/1.1\nHost: 127.0.0.1\n\n", 400),  # bare LF
        (b"GET /v1/sessions/\xff HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400),
        (b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: b\x00c\r\n\r\n", 400),
        (b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: b\r\n c\r\n\r\n", 400),  # obs-fold
        (b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: 127.0.0.1\r\n\r\n", 400),
        (_post_with(b"Content-Length: -1"), 400),
        (_post_with(b"Content-Length: " + b"9" * 30), 400),
        (_post_with(b"Content-Length: 2\r\nContent-Length: 3"), 400),
        (_post_with(b"Content-Length: 2\r\nTransfer-Encoding: chunked") + b"0\r\n\r\n", 400),  # smuggling
        (_post_with(b"Transfer-Encoding: foo"), 400),
        (_post_with(b"Transfer-Encoding: chunked") + b"zz\r\n{}\r\n0\r\n\r\n", 400),
        (_post_with(b"Transfer-Encoding: chunked") + b"f" * 20 + b"\r\n{}\r\n0\r\n\r\n", 400),
    ],
)
async def test_what_the_parser_refuses_gets_a_json_error(connect: Any, raw: bytes, status: int) -> None:
    connection = await connect()
    await connection.send(raw)
    answer = await connection.response()
    assert error_of(*answer)[0] == status
    assert b"malformed request" in answer[2]
    assert await connection.closed()


async def keep_sending(connection: Connection, data: bytes, for_s: float) -> None:
    """A client that goes on sending, `data` every 50 ms, without reading."""
    loop = asyncio.get_running_loop()
    end = loop.time() + for_s
    while loop.time() < end:
        await connection.send(data)
        await asyncio.sleep(0.05)  # the client's pace, not a wait for the server


async def test_a_client_still_sending_its_head_reads_the_408(guarded: RunningServer, connect: Any) -> None:
    """The server does not reset a connection whose client is still sending when it answers:
    a reset would make the client's kernel drop the 408 it has not read yet."""
    connection = await connect()
    await connection.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    await keep_sending(connection, b"X-Slow: 1\r\n", HEAD_S + 0.5)
    assert error_of(*await connection.response()) == (408, "request_timeout")
    assert await connection.closed()


async def test_a_client_still_sending_its_body_reads_the_408(guarded: RunningServer, connect: Any) -> None:
    connection = await connect()
    await connection.send(_post(100_000) + b"{")
    await keep_sending(connection, b" ", BODY_S + 1.5)  # 1 B per 50 ms: far below 100 B/s
    assert error_of(*await connection.response()) == (408, "request_timeout")
    assert await connection.closed()
    assert closes(guarded, "body_timeout") == 1


async def test_a_closing_connection_reads_what_comes_for_a_bounded_time(guarded: RunningServer, connect: Any) -> None:
    assert guarded.runner.server is not None and isinstance(guarded.runner.server, GuardedServer)
    guard = guarded.runner.server.guard
    guard.linger_s = 0.5
    connection = await connect()
    await connection.send(b"GET /healthz HTTP/1.1\r\n")
    assert error_of(*await connection.response()) == (408, "request_timeout")
    await eventually(lambda: guard.lingering == 1, what="the connection lingering")
    with contextlib.suppress(ConnectionError):  # the client ignores the answer and goes on sending
        await keep_sending(connection, b"X: 1\r\n", 3.0)
    # closed after linger_s (the client was still sending at 3 s otherwise)
    await eventually(lambda: guard.lingering == 0, what="the lingering connection closed")


@pytest.mark.parametrize("size", [64 * 1024, 1024 * 1024])
async def test_a_client_still_sending_a_huge_header_reads_the_431(connect: Any, size: int) -> None:
    connection = await connect()
    line = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * size + b"\r\n\r\n"
    with contextlib.suppress(ConnectionError):  # the server stops reading at some point: the answer counts
        await connection.send(line)
    assert error_of(*await connection.response())[0] == 431
    assert await connection.closed()
