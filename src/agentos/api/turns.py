"""Turns over HTTP: streamed as SSE, or answered whole as JSON; and cancelling them."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from agentos.api.admission import ADMISSION
from agentos.api.body import TurnCreate, read_body
from agentos.api.keys import RUNTIME
from agentos.api.owners import check_session
from agentos.api.routes import (
    BAD_BODY,
    SERVER_SENT_EVENT,
    SSE,
    Answer,
    Limits,
    Schema,
    json,
    nullable,
    retry,
    tagged,
)
from agentos.api.sessions import UNKNOWN, json_response
from agentos.api.sse import SSEStream, failures_as_events
from agentos.errors import NotAcceptable
from agentos.runtime.runtime import Runtime
from agentos.runtime.turn import TERMINAL_EVENTS, CollectingSink, Turn, check_input
from agentos.tenancy.principal import Scope, require

routes = web.RouteTableDef()
operation = tagged("turns")

_RESULT = Schema(
    "TurnResult",
    {
        "type": "object",
        "properties": {
            "turn_id": {"type": "string"},
            "session_id": {"type": "string"},
            "status": {"enum": ["completed", "cancelled", "failed"]},
            "output": {"type": "string"},
            "usage": {"type": "object"},
            "reason": {"type": "string"},
            "message": {"type": "string"},
            "finish_reason": {"type": "string"},
            "steered_into": {
                "type": "string",
                "description": "`on_busy` steer: the running agent turn this turn's message was delivered into",
            },
        },
    },
)
_CANCEL = Schema.object(
    "TurnCancel",
    {
        "cancelled": {"type": "boolean", "description": "false: no turn was running"},
        "turn_id": {**nullable("string"), "description": "the cancelled turn"},
    },
)
_TOKENS_QUOTA = (
    "`quota_tokens_per_day`: the tenant's provider tokens for the UTC day are spent (Retry-After: until 00:00 UTC)"
)


def wants_sse(accept: str) -> bool:
    """SSE if asked for; JSON for JSON, */* or no Accept; anything else is 406."""
    if "text/event-stream" in accept:
        return True
    if not accept or "application/json" in accept or "*/*" in accept or "application/*" in accept:
        return False
    raise NotAcceptable(f"cannot produce {accept!r}; use text/event-stream or application/json")


@routes.post("/v1/sessions/{session_id}/turns")
@operation(
    "Send a turn; what happens to a running turn of the session is `on_busy` (default: it is cancelled)",
    body=TurnCreate,
    answers={
        200: Answer(
            description="`text/event-stream`: events turn.queued (enqueue, steer: it waits its turn),"
            " turn.started, token, turn.steered (a message steered into this agent turn), then"
            " turn.completed | turn.cancelled | turn.failed. `application/json`: the whole turn.",
            content={SSE: SERVER_SENT_EVENT, "application/json": _RESULT},
        )
    },
    errors=BAD_BODY
    | UNKNOWN
    | {
        406: "Unsupported Accept",
        409: "`turn_in_progress`: `on_busy` reject and the session runs a turn (its id in `error.turn_id`)",
        503: retry("Draining: the server starts no new turns"),
    },
    limits=Limits(
        more_429="`turn_rate_limited` (turns per minute), `overloaded` (the server's admission limit),"
        " `tenant_concurrent_turns`, `user_concurrent_turns` (an end user's turns at once), `turn_queue_full`"
        " (`on_busy` enqueue or steer: the session's queue is full)",
        quota=_TOKENS_QUOTA,
        budgets=True,
    ),
)
async def post_turn(request: web.Request) -> web.StreamResponse:
    """The order of the checks (docs/api.md, "Admission"): the key (401), the request rate (429),
    the scope (403), Accept (406), draining (503) and the gate (429 `overloaded`,
    `tenant_concurrent_turns`) from headers and memory alone; only then the body (413, 400, 422),
    the token quota (403), the turn rate (429), the session (404), and the gate again."""
    who = require(request, Scope.SESSIONS_WRITE)
    runtime = request.app[RUNTIME]
    sse = wants_sse(request.headers.get("Accept", ""))
    admission = request.app[ADMISSION]
    admission.offer(who, "turn")  # a refusal reads no body and looks nothing up
    body = await read_body(request, TurnCreate)
    check_input(body.input, runtime.settings.kernel.max_input_chars)
    async with admission.starting(who, "turn", body.input) as started:
        await check_session(runtime, who, request.match_info["session_id"])
        turn = await runtime.start_turn(
            who.tenant_id,
            request.match_info["session_id"],
            body.input,
            key_id=who.key_id or "",
            user_max_turns=who.limits.user_max_concurrent_turns,
            on_busy=body.on_busy,
        )
        started.bind(turn.turn_id, turn.session_id)  # an agent's turn: its run's calls carry the session
    if not sse:
        return await _collect(runtime, turn)
    try:
        stream = await SSEStream.open(request, TERMINAL_EVENTS)
    except BaseException:
        await runtime.run_turn(turn, _GoneSink())  # record it as cancelled; never leave it admitted
        raise
    # The stream writes each event as it comes: no queue between the turn and the socket.
    failed = {"turn_id": turn.turn_id, "reason": "internal_error"}
    async with failures_as_events(stream, "turn.failed", failed, "turn %s failed mid-stream", turn.turn_id):
        await runtime.run_turn(turn, stream)
    return stream.response


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
    result |= {k: v for k, v in data.items() if k in ("usage", "reason", "message", "finish_reason", "steered_into")}
    return json_response(result)


@routes.delete("/v1/sessions/{session_id}/turn")
@operation("Cancel the running turn", answers={200: json("Whether a turn was running", _CANCEL)}, errors=UNKNOWN)
async def cancel_turn(request: web.Request) -> web.Response:
    who = require(request, Scope.SESSIONS_WRITE)
    runtime = request.app[RUNTIME]
    session_id = request.match_info["session_id"]
    await check_session(runtime, who, session_id)
    await runtime.ensure_loaded(who.tenant_id, session_id)
    turn_id = await runtime.cancel_turn_anywhere(who.tenant_id, session_id)
    return json_response({"cancelled": turn_id is not None, "turn_id": turn_id})


@routes.delete("/v1/sessions/{session_id}/turns/{turn_id}")
@operation(
    "Cancel one turn by id: a queued one leaves the session's queue, the running one is cancelled",
    answers={200: json("Whether that turn was live (on this node, or with a bus on another)", _CANCEL)},
    errors=UNKNOWN,
)
async def cancel_turn_by_id(request: web.Request) -> web.Response:
    who = require(request, Scope.SESSIONS_WRITE)
    runtime = request.app[RUNTIME]
    session_id, turn_id = request.match_info["session_id"], request.match_info["turn_id"]
    await check_session(runtime, who, session_id)
    await runtime.ensure_loaded(who.tenant_id, session_id)
    cancelled = await runtime.cancel_turn_by_id_anywhere(who.tenant_id, session_id, turn_id)
    return json_response({"cancelled": cancelled, "turn_id": turn_id if cancelled else None})
