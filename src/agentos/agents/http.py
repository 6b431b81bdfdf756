"""HTTP routes for agents and runs (aiohttp), on top of `RunService`.

Usage::

    app[RUN_SERVICE] = service
    add_routes(app, RUN_SERVICE)

    POST /v1/agents                   create or replace an agent      201 agent
    GET  /v1/agents                   list agents                      200 {"agents": [...]}
    GET  /v1/agents/{name}                                             200 agent
    POST /v1/agents/{name}/runs       {"input", "session_id"?}         202 {"run_id", "status", ...}
    GET  /v1/runs/{run_id}                                             200 run
    GET  /v1/runs/{run_id}/events     SSE, `id:` = seq; resumes after `Last-Event-ID` (or ?after=)
    POST /v1/runs/{run_id}/cancel     soft                             200 run
    POST /v1/runs/{run_id}/terminate  hard, any state                  200 run
    POST /v1/runs/{run_id}/answer     {"operation_id", "answer"?, "approve"?, "args_hash"?}  200 run

Bad input raises `agentos.errors.RequestError` subclasses; `error_middleware` (or the server's
own) turns them into `{"error": {"code", "message"}}`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, TypeVar

import msgspec
from aiohttp import web

from agentos.agents.handle import RunEvent
from agentos.agents.service import RunService
from agentos.errors import BadRequest, InvalidInput, RequestError

T = TypeVar("T")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

RUN_SERVICE: web.AppKey[RunService] = web.AppKey("agentos_run_service", RunService)


class RunCreate(msgspec.Struct, forbid_unknown_fields=True):
    input: str
    session_id: str | None = None


class AnswerBody(msgspec.Struct, forbid_unknown_fields=True):
    operation_id: str
    answer: str = ""
    approve: bool | None = None
    args_hash: str | None = None


def add_routes(
    app: web.Application, service_key: web.AppKey[RunService] = RUN_SERVICE, *, keepalive_s: float = 15.0
) -> None:
    """Add the agent and run routes; the handlers find the service at `app[service_key]`.

    `keepalive_s`: how often an idle event stream gets a comment line.
    """
    routes = _Routes(service_key, keepalive_s)
    app.router.add_post("/v1/agents", routes.create_agent)
    app.router.add_get("/v1/agents", routes.list_agents)
    app.router.add_get("/v1/agents/{name}", routes.get_agent)
    app.router.add_post("/v1/agents/{name}/runs", routes.start_run)
    app.router.add_get("/v1/runs/{run_id}", routes.get_run)
    app.router.add_get("/v1/runs/{run_id}/events", routes.events)
    app.router.add_post("/v1/runs/{run_id}/cancel", routes.cancel)
    app.router.add_post("/v1/runs/{run_id}/terminate", routes.terminate)
    app.router.add_post("/v1/runs/{run_id}/answer", routes.answer)


class _Routes:
    def __init__(self, service_key: web.AppKey[RunService], keepalive_s: float) -> None:
        self._key = service_key
        self._keepalive_s = keepalive_s

    def _service(self, request: web.Request) -> RunService:
        return request.app[self._key]

    async def create_agent(self, request: web.Request) -> web.Response:
        body = await _read(request, dict[str, Any])
        return _json(await self._service(request).create_agent(body), status=201)

    async def list_agents(self, request: web.Request) -> web.Response:
        return _json({"agents": self._service(request).list_agents()})

    async def get_agent(self, request: web.Request) -> web.Response:
        return _json(self._service(request).get_agent(request.match_info["name"]))

    async def start_run(self, request: web.Request) -> web.Response:
        body = await _read(request, RunCreate)
        service = self._service(request)
        run_id = await service.start_run(request.match_info["name"], body.input, body.session_id)
        links = {"run_url": f"/v1/runs/{run_id}", "events_url": f"/v1/runs/{run_id}/events"}
        return _json({"run_id": run_id, "status": "queued", **links}, status=202)

    async def get_run(self, request: web.Request) -> web.Response:
        return _json(await self._service(request).get_run(request.match_info["run_id"]))

    async def cancel(self, request: web.Request) -> web.Response:
        return _json(await self._service(request).cancel(request.match_info["run_id"]))

    async def terminate(self, request: web.Request) -> web.Response:
        return _json(await self._service(request).terminate(request.match_info["run_id"]))

    async def answer(self, request: web.Request) -> web.Response:
        body = await _read(request, AnswerBody)
        service = self._service(request)
        info = await service.answer(
            request.match_info["run_id"], body.operation_id, body.answer, approve=body.approve, args_hash=body.args_hash
        )
        return _json(info)

    async def events(self, request: web.Request) -> web.StreamResponse:
        service = self._service(request)
        run_id = request.match_info["run_id"]
        after = _after_seq(request)
        await service.get_run(run_id)  # a 404 before the stream starts
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        events = service.events(run_id, after)
        # Once the stream has started nothing may escape: a client that leaves just ends it.
        with contextlib.suppress(ConnectionError):
            try:
                while (event := await self._next_or_keepalive(events, response)) is not None:
                    await response.write(encode_sse(event.seq, event.type, event.data))
            finally:
                await events.aclose()
            await response.write_eof()
        return response

    async def _next_or_keepalive(
        self, events: AsyncGenerator[RunEvent, None], response: web.StreamResponse
    ) -> RunEvent | None:
        """The next event; while none comes (a run waiting for a human), a comment line every
        `keepalive_s` keeps proxies from closing the idle stream."""
        pending = asyncio.ensure_future(anext(events, None))
        try:
            while True:
                done, _ = await asyncio.wait({pending}, timeout=self._keepalive_s)
                if done:
                    return pending.result()
                await response.write(b": keep-alive\n\n")
        finally:
            if not pending.done():  # the client went away: stop reading, let the generator unwind
                pending.cancel()
                await asyncio.wait({pending})


def encode_sse(seq: int, event_type: str, data: dict[str, Any]) -> bytes:
    # JSON never contains a raw newline, so one `data:` line is always enough. Tokens are
    # live-only: no `id:`, so a client's Last-Event-ID stays on the last journaled event.
    if event_type == "token":
        return b"event: token\ndata: %s\n\n" % msgspec.json.encode(data)
    return b"id: %d\nevent: %s\ndata: %s\n\n" % (seq, event_type.encode(), msgspec.json.encode(data))


def _after_seq(request: web.Request) -> int:
    raw = request.headers.get("Last-Event-ID") or request.query.get("after") or "0"
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"Last-Event-ID must be an event seq (an integer), got {raw!r}") from None
    if value < 0:
        raise BadRequest(f"Last-Event-ID must not be negative, got {value}")
    return value


async def _read(request: web.Request, kind: type[T]) -> T:
    raw = await request.read()
    try:
        return msgspec.json.decode(raw or b"{}", type=kind)
    except msgspec.ValidationError as exc:
        raise InvalidInput(str(exc)) from None
    except msgspec.DecodeError as exc:
        raise BadRequest(f"malformed JSON: {exc}", code="malformed_json") from None


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=msgspec.json.encode(data), content_type="application/json")


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """`RequestError` -> `{"error": {"code", "message"}}` with its status (for running these routes alone)."""
    try:
        return await handler(request)
    except RequestError as exc:
        body = msgspec.json.encode({"error": {"code": exc.code, "message": exc.message}})
        return web.Response(status=exc.status, body=body, content_type="application/json")
