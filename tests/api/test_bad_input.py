"""Every client mistake gets a clear 4xx with a JSON error body: never a 500, never a hang."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest

from agentos.testing import RunningServer
from tests.api.helpers import SSE, expect_error, new_session

JSON = {"Content-Type": "application/json"}


async def test_unknown_session_is_404(server: RunningServer, http: aiohttp.ClientSession) -> None:
    for method, path in [
        ("GET", "/v1/sessions/nope"),
        ("DELETE", "/v1/sessions/nope"),
        ("POST", "/v1/sessions/nope/turns"),
        ("DELETE", "/v1/sessions/nope/turn"),
        ("GET", "/v1/sessions/nope/messages"),
        ("GET", "/v1/sessions/nope/events"),
        ("GET", "/v1/sessions/nope/ws"),
    ]:
        async with http.request(method, server.url + path, json={"input": "x"}) as r:
            await expect_error(r, 404, "session_not_found")


@pytest.mark.parametrize(
    "raw",
    [b"{", b"not json", b'{"input": "x"', b"\xff\xfe", b'{"input": "x"} trailing'],
)
async def test_malformed_json_is_400(server: RunningServer, http: aiohttp.ClientSession, raw: bytes) -> None:
    sid = await new_session(http, server.url)
    async with http.post(f"{server.url}/v1/sessions/{sid}/turns", data=raw, headers=JSON) as r:
        await expect_error(r, 400, "malformed_json")


@pytest.mark.parametrize(
    "body",
    [{"input": 5}, {"input": None}, {}, [], "text", {"input": "x", "extra": 1}, {"input": ""}, {"input": "   "}],
)
async def test_wrong_types_are_422(server: RunningServer, http: aiohttp.ClientSession, body: object) -> None:
    sid = await new_session(http, server.url)
    async with http.post(f"{server.url}/v1/sessions/{sid}/turns", json=body) as r:
        await expect_error(r, 422, "invalid_input")


async def test_bad_session_bodies(server: RunningServer, http: aiohttp.ClientSession) -> None:
    async with http.post(f"{server.url}/v1/sessions", json={"agent": 3}) as r:
        await expect_error(r, 422)
    async with http.post(f"{server.url}/v1/sessions", json={"metadata": "x"}) as r:
        await expect_error(r, 422)
    async with http.post(f"{server.url}/v1/sessions", data=b"[", headers=JSON) as r:
        await expect_error(r, 400)
    async with http.post(f"{server.url}/v1/sessions") as r:  # no body at all is fine
        assert r.status == 201


async def test_a_body_over_the_limit_is_413(server_factory, mock, http: aiohttp.ClientSession) -> None:
    server: RunningServer = await server_factory(mock.url, **{"server.max_body_bytes": 1000})
    sid = await new_session(http, server.url)
    async with http.post(f"{server.url}/v1/sessions/{sid}/turns", json={"input": "x" * 5000}) as r:
        await expect_error(r, 413, "payload_too_large")

    async def chunked() -> AsyncIterator[bytes]:  # no Content-Length: the limit must hold while reading
        for _ in range(10):
            yield b"x" * 500

    async with http.post(f"{server.url}/v1/sessions/{sid}/turns", data=chunked(), headers=JSON) as r:
        await expect_error(r, 413, "payload_too_large")


async def test_an_input_over_the_character_limit_is_422(server_factory, mock, http: aiohttp.ClientSession) -> None:
    server: RunningServer = await server_factory(mock.url, **{"kernel.max_input_chars": 10})
    sid = await new_session(http, server.url)
    async with http.post(f"{server.url}/v1/sessions/{sid}/turns", json={"input": "x" * 11}) as r:
        turn_error = (await expect_error(r, 422, "invalid_input"))["error"]["message"]
    async with http.post(f"{server.url}/v1/agents", json={"name": "ops", "tools": []}) as r:
        assert r.status == 201, await r.text()
    async with http.post(f"{server.url}/v1/agents/ops/runs", json={"input": "x" * 11}) as r:
        run_error = (await expect_error(r, 422, "invalid_input"))["error"][
            "message"
        ]  # a run's input: the same answer as a turn's
    assert run_error == turn_error == "input is 11 characters; the limit is 10"


async def test_an_unsupported_accept_is_406(server: RunningServer, http: aiohttp.ClientSession) -> None:
    sid = await new_session(http, server.url)
    headers = {"Accept": "text/html"}
    async with http.post(f"{server.url}/v1/sessions/{sid}/turns", json={"input": "x"}, headers=headers) as r:
        await expect_error(r, 406, "not_acceptable")


async def test_unknown_routes_and_methods(server: RunningServer, http: aiohttp.ClientSession) -> None:
    async with http.get(f"{server.url}/v2/nothing") as r:
        await expect_error(r, 404, "not_found")
    async with http.put(f"{server.url}/v1/sessions") as r:
        await expect_error(r, 405, "method_not_allowed")
        assert "POST" in r.headers["Allow"]


async def test_a_slow_hostile_client_does_not_block_others(server: RunningServer, http: aiohttp.ClientSession) -> None:
    """A client that sends headers and then stalls its body must not hold up anyone else."""
    host, port = server.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    sid = await new_session(http, server.url)
    head = f"POST /v1/sessions/{sid}/turns HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
    writer.write(f'{head}Content-Length: 100\r\n\r\n{{"inp'.encode())
    await writer.drain()
    async with http.post(f"{server.url}/v1/sessions/{sid}/turns", json={"input": "hi"}, headers=SSE) as r:
        assert r.status == 200
        assert (await r.text()).count("event: turn.completed") == 1
    writer.close()


async def test_garbage_on_the_socket_gets_a_400_not_a_crash(server: RunningServer, http: aiohttp.ClientSession) -> None:
    host, port = server.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"\x16\x03\x01 garbage that is no HTTP\r\n\r\n")
    await writer.drain()
    status_line = await asyncio.wait_for(reader.readline(), 5)
    assert status_line.split()[1] == b"400"
    writer.close()
    async with http.get(f"{server.url}/healthz") as r:
        assert r.status == 200
