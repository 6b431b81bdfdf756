"""Fixtures of the bench kit's tests: an in-process stub of the Agent OS turn API."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

Mode = str  # "ok" | "429" | "500" | "break" | "failed" | "cancelled"


@dataclass
class StubState:
    modes: list[Mode] = field(default_factory=lambda: ["ok"])
    created: int = 0
    deleted: int = 0
    turns: int = 0
    auth: Counter[str] = field(default_factory=Counter)  # "<route> <Authorization>" -> requests
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))


STATE = web.AppKey("stub_state", StubState)


def _frame(event: str, event_id: int, data: str) -> bytes:
    return f"event: {event}\nid: {event_id}\ndata: {data}\n\n".encode()


async def _create(request: web.Request) -> web.Response:
    state = request.app[STATE]
    state.created += 1
    state.auth[f"create {request.headers.get('Authorization', '-')}"] += 1
    return web.json_response({"id": f"s{next(state._ids)}"}, status=201)


async def _delete(request: web.Request) -> web.Response:
    request.app[STATE].deleted += 1
    request.app[STATE].auth[f"delete {request.headers.get('Authorization', '-')}"] += 1
    return web.Response(status=204)


async def _turn(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    mode = state.modes[state.turns % len(state.modes)]
    state.turns += 1
    state.auth[f"turn {request.headers.get('Authorization', '-')}"] += 1
    if mode == "429":
        return web.json_response({"error": {"code": "overloaded"}}, status=429, headers={"Retry-After": "0.01"})
    if mode == "500":
        return web.json_response({"error": {"code": "internal"}}, status=500)
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    await response.write(_frame("turn.started", 1, "{}"))
    await response.write(_frame("token", 2, '{"delta": "hi"}'))
    terminal = {"ok": "turn.completed", "failed": "turn.failed", "cancelled": "turn.cancelled"}.get(mode)
    if terminal:
        await response.write(_frame(terminal, 3, "{}"))
    return response


def create_stub_app(state: StubState) -> web.Application:
    app = web.Application()
    app[STATE] = state
    app.router.add_post("/v1/sessions", _create)
    app.router.add_delete("/v1/sessions/{session_id}", _delete)
    app.router.add_post("/v1/sessions/{session_id}/turns", _turn)
    app.router.add_get("/readyz", _ok)
    return app


async def _ok(_request: web.Request) -> web.Response:
    return web.Response(text="ok")


@dataclass
class Stub:
    url: str
    state: StubState


@pytest.fixture
async def stub() -> AsyncIterator[Stub]:
    state = StubState()
    server = TestServer(create_stub_app(state), host="127.0.0.1")
    await server.start_server()
    try:
        yield Stub(url=str(server.make_url("")).rstrip("/"), state=state)
    finally:
        await server.close()
