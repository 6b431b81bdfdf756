"""A session's WebSocket: frames `{"type": "turn", "input": ...}` and `{"type": "cancel"}` in,
the turn events out as `{"type": <event>, "id": ..., "data": {...}}`. Closing the socket
cancels the running turn: nothing outlives its client. While the server drains, a new turn
gets an error frame with code `shutting_down`; the socket stays open for the turn it holds.
docs/api.md describes the protocol: every frame, every error code.

The socket sends turns and cancels them, so opening it takes `sessions:write`; the session
must be the caller's tenant's (else a 404 before the upgrade), and every frame acts as that
tenant."""

from __future__ import annotations

import asyncio
from contextlib import suppress
from typing import Any, Literal

import msgspec
from aiohttp import WSCloseCode, WSMsgType, web

from agentos.api.admission import ADMISSION
from agentos.api.body import decode_json
from agentos.api.browser_tokens import SUBPROTOCOL
from agentos.api.errors import INTERNAL_MESSAGE, STARTED, log_internal_error
from agentos.api.keys import MAX_BODY_BYTES, RUNTIME
from agentos.api.owners import check_session
from agentos.api.routes import Answer, tagged
from agentos.api.sessions import UNKNOWN
from agentos.errors import RequestError
from agentos.kernel import OnBusy
from agentos.runtime.runtime import Runtime
from agentos.runtime.turn import Turn, check_input
from agentos.tenancy.principal import Principal, Scope, require

routes = web.RouteTableDef()
operation = tagged("turns")
_encode = msgspec.json.encode


class Frame(msgspec.Struct, forbid_unknown_fields=True):
    type: Literal["turn", "cancel"]
    input: str = ""
    on_busy: OnBusy | None = None  # a turn's: as in the turn body (None: the session's default)


@routes.get("/v1/sessions/{session_id}/ws")
@operation(
    "A WebSocket for the session's turns",
    description="Frames in: `{type: turn, input, on_busy?}`, `{type: cancel}`. Frames out: the turn events as"
    " `{type, id, data}`, and `{type: error, error: {code, message, retry_after_s?}}` for a"
    " refused frame. A turn cancelled before it started may end without `turn.started`."
    " docs/api.md has every frame and error code.",
    answers={101: Answer(description="Switching protocols")},
    errors=UNKNOWN | {400: "Not a WebSocket upgrade (a plain GET, or a bad Sec-WebSocket-* header)"},
)
async def session_socket(request: web.Request) -> web.WebSocketResponse:
    who = require(request, Scope.SESSIONS_WRITE)
    runtime = request.app[RUNTIME]
    session_id = request.match_info["session_id"]
    await check_session(runtime, who, session_id)  # 404 before the upgrade: not this user's
    await runtime.ensure_loaded(who.tenant_id, session_id)  # 404 before the upgrade
    # agentos.v1: the subprotocol a browser offers beside its token's (agentos.api.browser_tokens)
    ws = web.WebSocketResponse(heartbeat=30, max_msg_size=request.app[MAX_BODY_BYTES], protocols=(SUBPROTOCOL,))
    await upgrade(request, ws)
    running: set[asyncio.Task[None]] = set()
    sink = WebSocketSink(ws)
    try:
        async for message in ws:
            if message.type is not WSMsgType.TEXT:
                await _send_error(ws, "unsupported_frame", "send JSON text frames")
                continue
            try:
                turn = await _on_frame(request.app, who, session_id, message.data)
            except RequestError as exc:  # as over HTTP: overloaded and shutting_down say when to retry
                extra: dict[str, str | int] = {} if exc.retry_after_s is None else {"retry_after_s": exc.retry_after_s}
                if exc.turn_id is not None:  # turn_in_progress: the running turn
                    extra["turn_id"] = exc.turn_id
                await _send_error(ws, exc.code, exc.message, **extra)
                continue
            except Exception:  # the socket is open: a failure is a frame, never an escaping exception
                error_id = log_internal_error("a frame on the WebSocket of session %s failed", session_id)
                await _send_error(ws, "internal_error", INTERNAL_MESSAGE, error_id=error_id)
                continue
            if turn is not None:
                # its own task, so this loop keeps reading frames (a cancel, a newer turn)
                task = asyncio.create_task(_run_turn(runtime, turn, sink))
                running.add(task)
                task.add_done_callback(running.discard)
    finally:
        for task in list(running):
            task.cancel()  # the socket is gone: its turns end as client_disconnected
        if running:
            await asyncio.wait(running)
    return ws


async def _on_frame(app: web.Application, who: Principal, session_id: str, raw: str) -> Turn | None:
    runtime, tenant_id = app[RUNTIME], who.tenant_id
    frame = decode_json(raw, Frame)
    if frame.type == "cancel":
        await runtime.ensure_loaded(tenant_id, session_id)  # it may have been evicted since
        runtime.cancel_turn(tenant_id, session_id)
        return None
    check_input(frame.input, runtime.settings.kernel.max_input_chars)
    admission = app[ADMISSION]  # a turn started over the socket is admitted like one over HTTP
    admission.offer(who, "turn")
    async with admission.starting(who, "turn", frame.input) as started:
        turn = await runtime.start_turn(
            tenant_id,
            session_id,
            frame.input,
            key_id=who.key_id or "",
            user_max_turns=who.limits.user_max_concurrent_turns,
            on_busy=frame.on_busy,
        )
        started.bind(turn.turn_id, turn.session_id)  # an agent's turn: its run's calls carry the session
        return turn


async def _run_turn(runtime: Runtime, turn: Turn, sink: WebSocketSink) -> None:
    """The turn's task: a failure the runtime did not turn into an event becomes `turn.failed`."""
    try:
        await runtime.run_turn(turn, sink)
    except ConnectionError:
        pass  # the socket is gone: nobody to tell
    except Exception:
        error_id = log_internal_error("turn %s failed on a WebSocket", turn.turn_id)
        data = {"turn_id": turn.turn_id, "reason": "internal_error", "message": INTERNAL_MESSAGE, "error_id": error_id}
        with suppress(ConnectionError):  # no id: it is not one of the turn's stored events
            await sink.send(None, "turn.failed", data)


class WebSocketSink:
    __slots__ = ("_ws",)

    def __init__(self, ws: web.WebSocketResponse) -> None:
        self._ws = ws

    async def send(self, event_id: str | None, name: str, data: dict[str, Any]) -> None:
        if self._ws.closed:
            raise ConnectionResetError("the WebSocket is closed")
        await self._ws.send_str(_encode({"type": name, "id": event_id, "data": data}).decode())


async def _send_error(ws: web.WebSocketResponse, code: str, message: str, **extra: str | int) -> None:
    """An error frame `{"type": "error", "error": {"code", "message", ...}}` (docs/api.md)."""
    await ws.send_str(_encode({"type": "error", "error": {"code": code, "message": message, **extra}}).decode())


async def upgrade(request: web.Request, ws: web.WebSocketResponse) -> None:
    """Upgrade to `ws`. From here on a failure that escapes the handler closes the socket with
    1011 and an error id (`agentos.api.errors.STARTED`), never an HTTP 500 written into it."""
    await ws.prepare(request)
    request[STARTED] = _SocketEnd(ws)


class _SocketEnd:
    """The error middleware's end of a socket whose handler failed after the upgrade."""

    __slots__ = ("_ws",)

    def __init__(self, ws: web.WebSocketResponse) -> None:
        self._ws = ws

    async def end_with_failure(self, exc: Exception) -> web.StreamResponse:
        if not isinstance(exc, ConnectionError):
            error_id = log_internal_error("a WebSocket failed after its upgrade")
            with suppress(ConnectionError):
                await self._ws.close(code=WSCloseCode.INTERNAL_ERROR, message=error_id.encode())
        return self._ws
