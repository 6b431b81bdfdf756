"""Turns over HTTP: streamed as SSE, or answered whole as JSON; and cancelling them."""

from __future__ import annotations

from contextlib import suppress
from typing import Any

from aiohttp import web

from agentos.api.body import TurnCreate, read_body
from agentos.api.keys import RUNTIME
from agentos.api.sessions import json_response
from agentos.api.sse import encode_event
from agentos.errors import InvalidInput, NotAcceptable, RequestError
from agentos.runtime.runtime import Runtime
from agentos.runtime.turn import CollectingSink, Turn

routes = web.RouteTableDef()

_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class ShuttingDown(RequestError):
    status = 503
    code = "shutting_down"


def wants_sse(accept: str) -> bool:
    """SSE if asked for; JSON for JSON, */* or no Accept; anything else is 406."""
    if "text/event-stream" in accept:
        return True
    if not accept or "application/json" in accept or "*/*" in accept or "application/*" in accept:
        return False
    raise NotAcceptable(f"cannot produce {accept!r}; use text/event-stream or application/json")


def check_input(runtime: Runtime, text: str) -> None:
    if not text.strip():
        raise InvalidInput("input must not be empty")
    limit = runtime.settings.kernel.max_input_chars
    if len(text) > limit:
        raise InvalidInput(f"input is {len(text)} characters; the limit is {limit}")


class SSESink:
    """Writes each event to the response as it comes: no queue between the turn and the socket."""

    __slots__ = ("_response",)

    def __init__(self, response: web.StreamResponse) -> None:
        self._response = response

    async def send(self, event_id: str, name: str, data: dict[str, Any]) -> None:
        await self._response.write(encode_event(event_id, name, data))


@routes.post("/v1/sessions/{session_id}/turns")
async def post_turn(request: web.Request) -> web.StreamResponse:
    runtime = request.app[RUNTIME]
    sse = wants_sse(request.headers.get("Accept", ""))
    body = await read_body(request, TurnCreate)
    check_input(runtime, body.input)
    if not runtime.accepting:
        raise ShuttingDown("the server is shutting down")
    turn = await runtime.start_turn(request.match_info["session_id"], body.input)
    if not sse:
        return await _collect(runtime, turn)
    response = web.StreamResponse(headers=_SSE_HEADERS)
    try:
        await response.prepare(request)
    except BaseException:
        await runtime.run_turn(turn, _GoneSink())  # record it as cancelled; never leave it admitted
        raise
    await runtime.run_turn(turn, SSESink(response))
    with suppress(ConnectionError):  # the client may leave right after the terminal event
        await response.write_eof()
    return response


class _GoneSink:
    async def send(self, event_id: str, name: str, data: dict[str, Any]) -> None:
        raise ConnectionResetError("the client went away before the stream started")


async def _collect(runtime: Runtime, turn: Turn) -> web.Response:
    sink = CollectingSink()
    await runtime.run_turn(turn, sink)
    _, name, data = sink.events[-1]
    output = "".join(d["delta"] for _, n, d in sink.events if n == "token")
    result: dict[str, Any] = {
        "turn_id": turn.turn_id,
        "session_id": turn.session_id,
        "status": name.removeprefix("turn."),
        "output": output,
    }
    result |= {k: v for k, v in data.items() if k in ("usage", "reason", "message", "finish_reason")}
    return json_response(result)


@routes.delete("/v1/sessions/{session_id}/turn")
async def cancel_turn(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME]
    session_id = request.match_info["session_id"]
    await runtime.ensure_loaded(session_id)
    turn_id = runtime.cancel_turn(session_id)
    return json_response({"cancelled": turn_id is not None, "turn_id": turn_id})
