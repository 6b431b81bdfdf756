"""Follow a turn's events, and resume them, on any node.

Route::

    GET /v1/sessions/{session_id}/turns/{turn_id}/events   SSE, `id:` = `<turn_id>:<seq>`

It replays the turn's stored events after the seq the client names (`Last-Event-ID:
<turn_id>:<seq>`, as the POST's stream numbered them, or `?after=<seq>`), then follows the live
ones until the terminal event. Tokens are live only: they carry no `id:`, so a reconnecting
client resumes after the last stored event it got, and tokens sent while it was away are gone
(the answer is in the transcript). Takes `sessions:read`; another tenant's session or turn is
a 404.
"""

from __future__ import annotations

from aiohttp import web

from agentos.api.body import MAX_AFTER, resume_after
from agentos.api.keys import RUNTIME, SSE_KEEPALIVE_S
from agentos.api.owners import check_session
from agentos.api.routes import SEQ, events, header, query, tagged
from agentos.api.sse import SSEStream, failures_as_events
from agentos.runtime.turn import TERMINAL_EVENTS
from agentos.tenancy.principal import Scope, require

routes = web.RouteTableDef()
operation = tagged("turns")

_ENDS = TERMINAL_EVENTS | {"error"}
_EVENT_ID = {
    "type": "string",
    "pattern": "^([A-Za-z0-9_]+:)?[0-9]{1,19}$",
    "description": f"`<turn_id>:<seq>` as the turn's streams number events, or a seq (0 to {MAX_AFTER})",
}


@routes.get("/v1/sessions/{session_id}/turns/{turn_id}/events")
@operation(
    "Follow a turn's events as SSE from any node, resumable after Last-Event-ID (or ?after=)",
    parameters=(
        header("Last-Event-ID", _EVENT_ID["description"], _EVENT_ID),
        query("after", "a seq: resume after it", SEQ),
    ),
    answers={
        200: events(
            "The turn's stored events after the given seq (`id:` = `<turn_id>:<seq>`), then the live"
            " ones until turn.completed | turn.cancelled | turn.failed. Tokens are live only (no"
            " `id:`): those sent while the client was away are not replayed. If the stream itself"
            " fails or the turn sends nothing for a long time, the last event is `error` {code,"
            " message}, without an id: reconnect to resume."
        )
    },
    errors={
        400: "Bad Last-Event-ID or after: not a seq from 0 to 2**62, or an id of another turn",
        404: "Unknown session, or no such turn in it (`turn_not_found`)",
    },
)
async def turn_events(request: web.Request) -> web.StreamResponse:
    who = require(request, Scope.SESSIONS_READ)
    tenant_id = who.tenant_id
    session_id, turn_id = request.match_info["session_id"], request.match_info["turn_id"]
    after = resume_after(request, turn_id)
    await check_session(request.app[RUNTIME], who, session_id)
    # 404s before the stream starts: another tenant's session, a turn the session never had.
    events = await request.app[RUNTIME].follow_turn(tenant_id, session_id, turn_id, after)
    stream = await SSEStream.open(request, _ENDS)
    keepalive_s = request.app[SSE_KEEPALIVE_S]
    # The turn did not fail, its stream did: `error`, without an id, so a client that
    # reconnects with Last-Event-ID resumes after the last event it got.
    async with failures_as_events(stream, "error", {"code": "internal_error"}, "events of turn %s failed", turn_id):
        try:
            while (event := await stream.next_or_keepalive(events, keepalive_s)) is not None:
                live_only = event.name == "token" or event.seq == 0
                await stream.send(None if live_only else f"{turn_id}:{event.seq}", event.name, event.data)
        finally:
            await events.aclose()
    return stream.response
