"""A session's WebSocket: frames `{"type": "turn", "input": ...}` and `{"type": "cancel"}` in,
the turn events out as `{"type": <event>, "id": ..., "data": {...}}`. Closing the socket
cancels the running turn: nothing outlives its client."""

from __future__ import annotations

import asyncio
from typing import Literal

import msgspec
from aiohttp import WSMsgType, web

from agentos.api.body import decode_json
from agentos.api.keys import MAX_BODY_BYTES, RUNTIME
from agentos.api.turns import check_input
from agentos.errors import RequestError
from agentos.runtime.runtime import Runtime
from agentos.runtime.turn import TERMINAL_EVENTS, Turn

routes = web.RouteTableDef()
_encode = msgspec.json.encode


class Frame(msgspec.Struct, forbid_unknown_fields=True):
    type: Literal["turn", "cancel"]
    input: str = ""


@routes.get("/v1/sessions/{session_id}/ws")
async def session_socket(request: web.Request) -> web.WebSocketResponse:
    runtime = request.app[RUNTIME]
    session_id = request.match_info["session_id"]
    await runtime.ensure_loaded(session_id)  # 404 before the upgrade
    ws = web.WebSocketResponse(heartbeat=30, max_msg_size=request.app[MAX_BODY_BYTES])
    await ws.prepare(request)
    forwarders: set[asyncio.Task[None]] = set()
    turns: list[Turn] = []
    try:
        async for message in ws:
            if message.type is not WSMsgType.TEXT:
                await _send_error(ws, "unsupported_frame", "send JSON text frames")
                continue
            try:
                turn = await _on_frame(runtime, session_id, message.data)
            except RequestError as exc:
                await _send_error(ws, exc.code, exc.message)
                continue
            if turn is not None:
                turns = [t for t in turns if t.task is not None and not t.task.done()] + [turn]
                task = asyncio.create_task(_forward(ws, turn))
                forwarders.add(task)
                task.add_done_callback(forwarders.discard)
    finally:
        for turn in turns:
            runtime.drop_turn(turn, "client_disconnected")
        for task in list(forwarders):
            task.cancel()
    return ws


async def _on_frame(runtime: Runtime, session_id: str, raw: str) -> Turn | None:
    frame = decode_json(raw, Frame)
    if frame.type == "cancel":
        runtime.cancel_turn(session_id)
        return None
    check_input(runtime, frame.input)
    return await runtime.start_turn(session_id, frame.input)


async def _forward(ws: web.WebSocketResponse, turn: Turn) -> None:
    while True:
        event_id, name, data = await turn.next_event()
        if ws.closed:
            return
        await ws.send_str(_encode({"type": name, "id": event_id, "data": data}).decode())
        if name in TERMINAL_EVENTS:
            return


async def _send_error(ws: web.WebSocketResponse, code: str, message: str) -> None:
    await ws.send_str(_encode({"type": "error", "error": {"code": code, "message": message}}).decode())
