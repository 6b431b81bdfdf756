from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import msgspec
from aiohttp import web
from jsonschema import Draft202012Validator

from agentos.api.app import ROUTES
from agentos.api.openapi import document, table_routes
from agentos.config import Settings
from agentos.services import open_services
from agentos.testing import Event, RunningServer, serve_services, sse_events

SSE = {"Accept": "text/event-stream"}
# The document the app serves, written from its route tables (tests/api/test_openapi.py checks
# that a running server serves exactly this).
OPENAPI = document(table_routes(ROUTES))


async def new_session(http: aiohttp.ClientSession, url: str, **body: Any) -> str:
    async with http.post(f"{url}/v1/sessions", json=body) as r:
        assert r.status == 201, await r.text()
        session_id: str = (await r.json())["id"]
        return session_id


async def turn_events(http: aiohttp.ClientSession, url: str, session_id: str, text: str = "hello") -> list[Event]:
    async with http.post(f"{url}/v1/sessions/{session_id}/turns", json={"input": text}, headers=SSE) as r:
        assert r.status == 200, await r.text()
        assert r.headers["Content-Type"].startswith("text/event-stream")
        return [e async for e in sse_events(r)]


async def start_app(settings: Settings, change: Callable[[web.Application], object] | None = None) -> RunningServer:
    """The real application on loopback, like `agentos.testing.start_server`, after `change`
    has had the app before it starts (a test-only route, a shorter keepalive)."""
    return await serve_services(await open_services(settings), change)


async def expect_error(response: aiohttp.ClientResponse, status: int, code: str | None = None) -> dict[str, Any]:
    """The response is the JSON error body `{"error": {"code", "message"}}` with `status`."""
    assert response.status == status, await response.text()
    assert response.headers["Content-Type"].startswith("application/json")
    body: dict[str, Any] = await response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    if code is not None:
        assert body["error"]["code"] == code
    assert body["error"]["message"]
    return body


def assert_documented(value: Any, schema: str) -> None:
    """`value` is valid against the OpenAPI document's schema `schema` (JSON Schema 2020-12, its
    references resolved in the document), and has no field at the top that the schema does not
    describe."""
    root = {"$ref": f"#/components/schemas/{schema}", "components": OPENAPI["components"]}
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in Draft202012Validator(root).iter_errors(value)]
    assert not errors, (schema, errors, value)
    documented = OPENAPI["components"]["schemas"][schema]
    if isinstance(value, dict) and "properties" in documented:
        assert set(value) <= set(documented["properties"]), (schema, set(value) - set(documented["properties"]))


RAW_TIMEOUT_S = 2.0  # what a raw answer (or a close) may take on a loaded machine


class Connection:
    """One raw TCP connection to a server, for what an HTTP client hides (interim answers,
    the close, bytes the parser refuses)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def response(self, timeout_s: float = RAW_TIMEOUT_S) -> tuple[int, dict[str, str], bytes]:
        """The next answer (a 100 Continue too): status, headers (lower-case names) and body."""
        async with asyncio.timeout(timeout_s):
            head = await self.reader.readuntil(b"\r\n\r\n")
            status_line, *lines = head.decode().split("\r\n")[:-2]
            headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines)}
            body = await self.reader.readexactly(int(headers.get("content-length", "0")))
        return int(status_line.split()[1]), headers, body

    async def closed(self, timeout_s: float = RAW_TIMEOUT_S) -> bool:
        """The server closed the connection (EOF or reset) within `timeout_s`, with nothing more."""
        try:
            async with asyncio.timeout(timeout_s):
                return await self.reader.read() == b""
        except ConnectionResetError:
            return True


@contextlib.asynccontextmanager
async def connections(url: str) -> AsyncIterator[Callable[[], Awaitable[Connection]]]:
    """A maker of raw connections to the server at `url`; all closed at the end."""
    opened: list[Connection] = []
    host, port = url.removeprefix("http://").rsplit(":", 1)

    async def make() -> Connection:
        reader, writer = await asyncio.open_connection(host, int(port))
        opened.append(Connection(reader, writer))
        return opened[-1]

    try:
        yield make
    finally:
        for connection in opened:
            connection.writer.close()


def error_of(status: int, headers: dict[str, str], body: bytes) -> tuple[int, str]:
    """(status, code) of a JSON error answer; fails on any other body."""
    assert headers["content-type"].startswith("application/json"), (headers, body)
    error: dict[str, Any] = msgspec.json.decode(body)["error"]
    assert set(error) >= {"code", "message"} and error["message"]
    return status, error["code"]
