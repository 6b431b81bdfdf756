"""Sessions: create, list, read, delete; their transcript and events.

Every handler asks `require` for its scope and passes the principal's tenant down: another
tenant's session is a 404 `session_not_found`, exactly like one that does not exist.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import msgspec
from aiohttp import web

from agentos.api.body import MAX_AFTER, SessionCreate, page_limit, query_int, query_text, read_body
from agentos.api.keys import QUOTAS, RUNTIME
from agentos.api.owners import check_session, list_owner
from agentos.api.routes import (
    BAD_BODY,
    OWNER,
    Answer,
    Limits,
    Schema,
    json,
    listing,
    nullable,
    query,
    tagged,
)
from agentos.errors import SessionNotFound
from agentos.runtime.runtime import Runtime
from agentos.store.records import EventRecord, MessageRecord, SessionRecord
from agentos.tenancy.principal import Scope, require

routes = web.RouteTableDef()
operation = tagged("sessions")

T = TypeVar("T")

SESSION = Schema.object(
    "Session",
    {
        "id": {"type": "string"},
        "agent": {**nullable("string"), "description": "the agent that runs the turns; null: plain chat turns"},
        "metadata": {"type": "object"},
        "tenant_id": {"type": "string"},
        "created_at_ms": {"type": "integer"},
        "on_busy": {
            "enum": ["replace", "reject", "enqueue", "rollback", "steer", None],
            "description": "the default `on_busy` of its turns as opened; null: its agent's, else replace",
        },
        "active_turn": {**nullable("string"), "description": "GET of one session only"},
        "owner": OWNER,
    },
    ["id", "agent", "metadata", "tenant_id", "created_at_ms", "owner"],
)
_MESSAGE = Schema.object(
    "Message",
    {
        "id": {"type": "integer"},
        "turn_id": {"type": "string"},
        "role": {"enum": ["user", "assistant", "system", "tool"]},
        "content": {"type": "string"},
        "status": {"enum": ["completed", "cancelled", "failed"]},
        "usage": {"type": ["object", "null"], "additionalProperties": {"type": "integer"}},
        "created_at_ms": {"type": "integer"},
    },
    ["id", "turn_id", "role", "content", "status", "created_at_ms"],
)
_EVENT = Schema.object(
    "StoredEvent",
    {
        "id": {"type": "integer"},
        "turn_id": {"type": "string"},
        "type": {"type": "string", "description": "turn.started, turn.completed, ... (tokens are not stored)"},
        "data": {"type": "object"},
        "created_at_ms": {"type": "integer"},
    },
)
UNKNOWN = {404: "Unknown session"}
BAD_QUERY = {422: "A bad limit or after; the message names the parameter"}


def json_response(data: Any, status: int = 200) -> web.Response:
    return web.Response(body=msgspec.json.encode(data), status=status, content_type="application/json")


def page_response(found: Sequence[T], limit: int, show: Callable[[T], Any], cursor: Callable[[T], Any]) -> web.Response:
    """A page of a cursor-paginated list: the `found` items as `show` shows them. A full page
    names its last item's `cursor` as `next_cursor`; a shorter one is the last (null)."""
    next_cursor = cursor(found[-1]) if len(found) == limit else None
    return json_response({"data": [show(item) for item in found], "next_cursor": next_cursor})


def page_after(items: Iterable[dict[str, Any]], key: str, after: str | None, limit: int) -> web.Response:
    """A page of a list held whole, in `key` order: the items after `after` (None: from the
    first), at most `limit`; `next_cursor` names the last one's `key` when more follow (else null)."""
    later = sorted((item for item in items if after is None or str(item[key]) > after), key=lambda i: str(i[key]))
    page = later[:limit]
    return json_response({"data": page, "next_cursor": page[-1][key] if len(later) > limit else None})


def page_by_id(request: web.Request, items: Sequence[dict[str, Any]], key: str, default_limit: int) -> web.Response:
    """`page_after` with `?limit=` and `?after=` read from the request (a short list held whole,
    such as a tenant's triggers or schedules).

    Raises: InvalidInput (a bad limit or after)."""
    return page_after(items, key, query_text(request, "after"), page_limit(request, default_limit))


def session_json(runtime: Runtime, record: SessionRecord) -> dict[str, Any]:
    """A session as the API shows it; `agent` is what runs its turns (None: plain chat turns)."""
    return {
        "id": record.session_id,
        "agent": runtime.sessions.reported_agent(record),
        "metadata": record.metadata,
        "tenant_id": record.tenant_id,
        "created_at_ms": record.created_at_ms,
        "on_busy": record.on_busy,
        "owner": record.owner,
    }


@routes.post("/v1/sessions")
@operation(
    "Open a session",
    body=SessionCreate,
    body_required=False,
    answers={201: json("The session", SESSION)},
    errors=BAD_BODY | {404: "`agent_not_found`: no agent of that name this tenant can run"},
    limits=Limits(quota="`quota_sessions`: the tenant holds `max_sessions` sessions; delete some"),
)
async def create_session(request: web.Request) -> web.Response:
    who = require(request, Scope.SESSIONS_WRITE)
    body = await read_body(request, SessionCreate, empty_ok=True)
    runtime = request.app[RUNTIME]
    quotas = request.app[QUOTAS]
    await quotas.admit_session(who)  # counted before creating: concurrent creates cannot overshoot
    try:
        record = await runtime.create_session(
            who.tenant_id, body.agent, body.metadata, on_busy=body.on_busy, owner=who.subject
        )
    except BaseException:
        quotas.release_session(who.tenant_id)
        raise
    return json_response(session_json(runtime, record), status=201)


@routes.get("/v1/sessions")
@operation(
    "List sessions",
    **listing(
        "A page of sessions, oldest first",
        "SessionPage",
        SESSION,
        50,
        query("agent", "only sessions opened with this agent (`default`: opened without one)"),
    ),
    errors=BAD_QUERY,
)
async def list_sessions(request: web.Request) -> web.Response:
    who = require(request, Scope.SESSIONS_READ)
    runtime = request.app[RUNTIME]
    limit = page_limit(request, 50)
    after, agent = query_text(request, "after"), query_text(request, "agent")
    owner = list_owner(who)
    records = await runtime.store.list_sessions(who.tenant_id, limit=limit, after=after, agent=agent, owner=owner)
    return page_response(records, limit, lambda r: session_json(runtime, r), lambda r: r.session_id)


@routes.get("/v1/sessions/{session_id}")
@operation("Read a session", answers={200: json("The session", SESSION)}, errors=UNKNOWN)
async def get_session(request: web.Request) -> web.Response:
    who = require(request, Scope.SESSIONS_READ)
    runtime = request.app[RUNTIME]
    session_id = request.match_info["session_id"]
    record = await runtime.get_session(who.tenant_id, session_id)
    if not who.may_see("session", session_id, record.owner):
        raise SessionNotFound(session_id)
    data = session_json(runtime, record) | {"active_turn": runtime.kernel.active_turn(session_id)}
    return json_response(data)


@routes.delete("/v1/sessions/{session_id}")
@operation("Delete a session and its transcript", answers={204: Answer(description="Deleted")}, errors=UNKNOWN)
async def delete_session(request: web.Request) -> web.Response:
    who = require(request, Scope.SESSIONS_WRITE)
    session_id = request.match_info["session_id"]
    await check_session(request.app[RUNTIME], who, session_id)
    await request.app[RUNTIME].delete_session(who.tenant_id, session_id)
    request.app[QUOTAS].release_session(who.tenant_id)
    return web.Response(status=204)


async def _page(request: web.Request) -> tuple[Runtime, str, str, int, int]:
    """The runtime, the caller's tenant, the (existing, the tenant's) session id, `after` and
    `limit` of a cursor-paginated read."""
    who = require(request, Scope.SESSIONS_READ)
    runtime = request.app[RUNTIME]
    session_id = request.match_info["session_id"]
    limit = page_limit(request, 100)
    after = query_int(request, "after", 0, low=0, high=MAX_AFTER)
    record = await runtime.get_session(who.tenant_id, session_id)  # 404 for an unknown (or another tenant's) session
    if not who.may_see("session", session_id, record.owner):
        raise SessionNotFound(session_id)
    return runtime, who.tenant_id, session_id, after, limit


@routes.get("/v1/sessions/{session_id}/messages")
@operation(
    "The transcript, cursor-paginated",
    **listing("A page of messages", "MessagePage", _MESSAGE, 100, after="integer", cursor=nullable("integer")),
    errors=BAD_QUERY | UNKNOWN,
)
async def list_messages(request: web.Request) -> web.Response:
    runtime, tenant_id, session_id, after, limit = await _page(request)
    records = await runtime.store.list_messages(tenant_id, session_id, after=after, limit=limit)
    return page_response(records, limit, _message_json, lambda m: m.message_id)


def _message_json(m: MessageRecord) -> dict[str, Any]:
    return {
        "id": m.message_id,
        "turn_id": m.turn_id,
        "role": m.role,
        "content": m.content,
        "status": m.status,
        "usage": m.usage,
        "created_at_ms": m.created_at_ms,
    }


@routes.get("/v1/sessions/{session_id}/events")
@operation(
    "Stored turn events, cursor-paginated",
    **listing("A page of events", "EventPage", _EVENT, 100, after="integer", cursor=nullable("integer")),
    errors=BAD_QUERY | UNKNOWN,
)
async def list_events(request: web.Request) -> web.Response:
    runtime, tenant_id, session_id, after, limit = await _page(request)
    records = await runtime.store.list_events(tenant_id, session_id, after=after, limit=limit)
    return page_response(records, limit, _event_json, lambda e: e.event_id)


def _event_json(e: EventRecord) -> dict[str, Any]:
    return {"id": e.event_id, "turn_id": e.turn_id, "type": e.type, "data": e.data, "created_at_ms": e.created_at_ms}
