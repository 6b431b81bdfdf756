"""A turn run for an OpenAI route (`openai_chat`, `openai_responses`): the request's first checks
in a native turn's order, the turn run whole or streamed, and its failures in OpenAI's terms.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import suppress
from typing import Any, TypeVar

from aiohttp import web

from agentos.api.admission import ADMISSION
from agentos.api.body import read_body
from agentos.api.errors import INTERNAL_MESSAGE, STARTED, log_internal_error
from agentos.api.keys import RUNTIME
from agentos.api.openai_errors import SESSION_ANSWERED, TURN_LIMITS_429, TURN_QUOTA
from agentos.api.openai_turns import SESSION_HEADER
from agentos.api.openai_wire import error_body
from agentos.api.routes import SERVER_SENT_EVENT, SSE, Answer, Limits, Schema
from agentos.api.sse import SSE_HEADERS
from agentos.errors import RequestError, StoreUnavailable
from agentos.runtime.turn import CollectingSink, Turn
from agentos.tenancy.principal import Principal, Scope, require

T = TypeVar("T")

# What a route that runs a turn documents beside its errors.
TURN_LIMITS = Limits(more_429=TURN_LIMITS_429, quota=TURN_QUOTA, budgets=True)


def turn_answer(description: str, whole: Schema) -> dict[int, str | Answer]:
    """The 200 of a route that answers `whole`, or a stream of events with `stream: true`."""
    content = {"application/json": whole, SSE: SERVER_SENT_EVENT}
    return {200: Answer(description=description, content=content, headers=SESSION_ANSWERED)}


async def read_turn_request(request: web.Request, kind: type[T]) -> tuple[Principal, T]:
    """The caller and the body, checked in a native turn's order: the scope, the admission gate
    (a refusal reads no body), then the body."""
    who = require(request, Scope.SESSIONS_WRITE)
    request.app[ADMISSION].offer(who, "turn")
    return who, await read_body(request, kind)


async def collect_turn(request: web.Request, turn: Turn) -> tuple[str, dict[str, Any], str]:
    """Run the turn to its end: its last event's name and data, and its answer."""
    sink = CollectingSink()
    await request.app[RUNTIME].run_turn(turn, sink)
    _, name, data = sink.events[-1]
    return name, data, answer_of(data, "".join(d["delta"] for _, n, d in sink.events if n == "token"))


def answer_of(data: dict[str, Any], tokens: str) -> str:
    return str(data["result"]) if "result" in data else tokens  # an agent's answer is its result


class OpenAIStream:
    """A turn sink writing a route's stream; also the request's started response
    (`agentos.api.errors.STARTED`): a failure after the headers left ends it with the route's
    error event, never a second status line."""

    __slots__ = ("ended", "response")

    def __init__(self, response: web.StreamResponse) -> None:
        self.response = response
        self.ended = False

    async def send(self, event_id: Any, name: str, data: dict[str, Any]) -> None:
        raise NotImplementedError

    def failure_line(self, body: dict[str, Any]) -> bytes:
        """The stream's last event for a failure: `body` is OpenAI's error body."""
        raise NotImplementedError

    async def close(self) -> None:
        with suppress(ConnectionError):
            await self.response.write_eof()

    async def end_with_failure(self, exc: Exception) -> web.StreamResponse:
        if not isinstance(exc, ConnectionError) and not self.ended:
            with suppress(ConnectionError):
                await self.response.write(self.failure_line(failure_body(exc)))
        await self.close()
        return self.response


async def stream_turn(
    request: web.Request, turn: Turn, open_stream: Callable[[web.StreamResponse], OpenAIStream]
) -> web.StreamResponse:
    """Run the turn into the stream `open_stream` writes on the response once it is prepared."""
    runtime = request.app[RUNTIME]
    response = web.StreamResponse(headers={**SSE_HEADERS, SESSION_HEADER: turn.session_id})
    try:
        await response.prepare(request)
    except BaseException:
        await runtime.run_turn(turn, GoneSink())  # record it as cancelled; never leave it admitted
        raise
    stream = open_stream(response)
    request[STARTED] = stream
    await runtime.run_turn(turn, stream)
    await stream.close()
    return response


class GoneSink:
    async def send(self, event_id: str, name: str, data: dict[str, Any]) -> None:
        raise ConnectionResetError("the client went away before the stream started")


def turn_failure(name: str, data: dict[str, Any]) -> tuple[int, str, str]:
    """Status, code and message of a turn that did not complete."""
    reason = str(data.get("reason", "internal_error"))
    message = str(data.get("message") or f"the turn ended {name.removeprefix('turn.')}: {reason}")
    if name == "turn.cancelled":
        return (503, reason, message) if reason == "shutdown" else (409, reason, message)
    if reason.startswith("provider"):
        return 502, reason, message
    return (503, reason, message) if reason == "store_unavailable" else (500, reason, message)


def failure_body(exc: Exception) -> dict[str, Any]:
    """OpenAI's error body for a failure after the stream started."""
    if isinstance(exc, RequestError):
        return error_body(exc.status, exc.code, exc.message)
    if isinstance(exc, StoreUnavailable):
        return error_body(503, exc.code, "the store cannot be reached; retry later")
    error_id = log_internal_error("a chat completion stream failed after it started")
    return error_body(500, "internal_error", f"{INTERNAL_MESSAGE} (error_id {error_id})")
