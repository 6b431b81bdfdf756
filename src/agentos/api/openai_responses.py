"""The Responses API: `POST /v1/responses` (streamed or whole) and `GET /v1/responses/{id}`.

A response is a turn. Without `previous_response_id` it opens a session of its own (like a
stateless chat completion: the model sees `instructions` and `input` as sent); with it, the
turn continues that response's session, whose transcript is the history. Only the session's
latest response may be continued: branching from an older one is a 409 (`x-should-retry:
false`). Checks, tenancy and admission are the chat completion's (`agentos.api.openai_chat`).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from agentos.api import openai_run
from agentos.api.keys import RUNTIME
from agentos.api.openai_errors import BAD_BODY, TURN_ERRORS, openai_error
from agentos.api.openai_responses_wire import parse_response_id, response_id
from agentos.api.openai_turns import InvalidParam, TurnPlan, open_turn, plan_turn, resolve_model
from agentos.api.openai_wire import ChatMessage, ResponseCreate
from agentos.api.owners import check_session
from agentos.api.routes import Schema, json, nullable, tagged
from agentos.api.sessions import json_response
from agentos.clock import wall_ms
from agentos.errors import Conflict, NotFound
from agentos.providers.responses_wire import EventWriter, response_object
from agentos.store.base import Store
from agentos.store.records import MessageRecord
from agentos.tenancy.principal import Principal, Scope, require

routes = web.RouteTableDef()
operation = tagged("openai")

# Fields of OpenAI's response object that Agent OS answers with one fixed value each.
_FIXED_RESPONSE_FIELDS = {
    "incomplete_details": {"type": "null"},
    "instructions": {"type": "null"},
    "metadata": {"type": "object"},
    "parallel_tool_calls": {"const": False},
    "store": {"const": True},
    "temperature": {"type": "null"},
    "text": {"type": "object"},
    "tool_choice": {"const": "auto"},
    "tools": {"type": "array", "maxItems": 0},
    "top_p": {"type": "null"},
    "truncation": {"const": "disabled"},
}
# As much of OpenAI's response object as Agent OS fills (`agentos.api.openai_responses_wire`).
_RESPONSE = Schema.object(
    "OpenAIResponse",
    {
        "id": {"type": "string"},
        "object": {"const": "response"},
        "created_at": {"type": "integer"},
        "status": {"enum": ["completed", "failed", "in_progress", "cancelled", "incomplete"]},
        "model": {"type": "string"},
        "output": {"type": "array", "items": {"type": "object"}},
        "usage": {"type": ["object", "null"], "description": "input_tokens, output_tokens, total_tokens"},
        "error": {"type": ["object", "null"], "description": "{code, message} of a turn that did not complete"},
        "previous_response_id": nullable("string"),
        **_FIXED_RESPONSE_FIELDS,
    },
    ["id", "object", "created_at", "status", "model", "output"],
)


@routes.post("/v1/responses")
@operation(
    "A turn as an OpenAI response; previous_response_id continues its session",
    body=ResponseCreate,
    answers=openai_run.turn_answer("The response; with `stream: true`, the Responses API's events", _RESPONSE),
    errors=BAD_BODY | TURN_ERRORS | {404: "`model_not_found`, or `previous_response_not_found`"},
    limits=openai_run.TURN_LIMITS,
)
async def create_response(request: web.Request) -> web.StreamResponse:
    who, body = await openai_run.read_turn_request(request, ResponseCreate)
    agent = await resolve_model(request.app, who.tenant_id, body.model)
    plan = _plan(body, agent, continued=body.previous_response_id is not None)  # before any store read
    session_id = None
    if body.previous_response_id is not None:
        session_id = await _continued(request, who, body.previous_response_id)
    turn = await open_turn(request, who, agent, session_id, plan)
    rid = response_id(turn.session_id, turn.turn_id)
    start = response_object(rid, wall_ms() // 1000, body.model, "in_progress", None, previous=body.previous_response_id)
    if body.stream:
        return await openai_run.stream_turn(request, turn, lambda response: ResponseStream(response, start))
    name, data, text = await openai_run.collect_turn(request, turn)
    if name != "turn.completed":
        return openai_error(*openai_run.turn_failure(name, data))
    return json_response(_done(start, text, data))


def _plan(body: ResponseCreate, agent: str | None, *, continued: bool) -> TurnPlan:
    """Raises: InvalidParam (`input`, `instructions`, `tools`, and `plan_turn`'s)."""
    refused = (
        ("tools", bool(body.tools)),
        ("conversation", body.conversation is not None),
        ("background", body.background),
    )
    for param, given in refused:
        if given:
            raise InvalidParam(param, f"{param} is not supported on /v1/responses; see docs/openai.md")
    items = [ChatMessage(role="user", content=body.input)] if isinstance(body.input, str) else body.input
    if continued and (len(items) != 1 or body.instructions is not None):
        param = "instructions" if body.instructions is not None else "input"
        raise InvalidParam(param, "with previous_response_id, give one input message and no instructions")
    if body.instructions is not None:
        items = [ChatMessage(role="system", content=body.instructions), *items]
    try:
        return plan_turn(items, None, agent=agent, stateful=continued)
    except InvalidParam as exc:
        exc.param = "input"
        raise


async def _continued(request: web.Request, who: Principal, previous: str) -> str:
    """The session `previous` continues, when it is the session's latest response.

    Raises: NotFound `previous_response_not_found` (also another tenant's, or another user's);
    Conflict `branching_not_supported`.
    """
    ids = parse_response_id(previous)
    runtime = request.app[RUNTIME]
    missing = NotFound(f"Previous response with id {previous!r} not found.", code="previous_response_not_found")
    try:
        if ids is not None:  # another user's conversation: not found, before anything tells it exists
            await check_session(runtime, who, ids[0])
    except NotFound:
        raise missing from None
    latest = [] if ids is None else await runtime.store.history(who.tenant_id, ids[0], limit=1)
    if ids is None or not latest:
        raise missing
    if latest[-1].turn_id != ids[1]:
        raise Conflict(
            f"{previous!r} is not the latest response of its conversation; branching is not supported",
            code="branching_not_supported",
        )
    return ids[0]


def _done(start: dict[str, Any], text: str, data: dict[str, Any]) -> dict[str, Any]:
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    previous = start["previous_response_id"]
    return response_object(
        start["id"], start["created_at"], start["model"], "completed", text, usage=usage, previous=previous
    )


class ResponseStream(openai_run.OpenAIStream):
    """A turn sink writing the Responses API's events, ended by `response.failed` on a failure."""

    __slots__ = ("_start", "_events", "_text")

    def __init__(self, response: web.StreamResponse, start: dict[str, Any]) -> None:
        super().__init__(response)
        self._start = start
        self._events = EventWriter()
        self._text: list[str] = []

    async def send(self, event_id: Any, name: str, data: dict[str, Any]) -> None:
        if name == "turn.started":
            line = self._events.opening(self._start)
        elif name == "token" and data.get("delta"):
            self._text.append(data["delta"])
            line = self._events.delta(self._start["id"], data["delta"])
        elif name == "turn.completed":
            self.ended = True
            text = "".join(self._text) or openai_run.answer_of(data, "")
            line = self._events.closing(_done(self._start, text, data), text)
        elif name in ("turn.failed", "turn.cancelled"):
            _, code, message = openai_run.turn_failure(name, data)
            line = self._failed(code, message)
        else:  # an agent's tool activity and human requests stay on the native routes
            return
        await self.response.write(line)

    def _failed(self, code: str, message: str) -> bytes:
        self.ended = True
        failed = self._start | {"status": "failed", "error": {"code": code, "message": message}}
        return self._events.event("response.failed", response=failed)

    def failure_line(self, body: dict[str, Any]) -> bytes:
        return self._failed(body["error"]["code"], body["error"]["message"])


@routes.get("/v1/responses/{response_id}")
@operation(
    "A response: its turn's answer and how the turn ended",
    answers={200: json("The response", _RESPONSE)},
    errors={404: "`response_not_found` (also another tenant's)"},
)
async def get_response(request: web.Request) -> web.Response:
    """A response as stored: its turn's answer and how the turn ended (`in_progress` before)."""
    who = require(request, Scope.SESSIONS_READ)
    tenant_id = who.tenant_id
    runtime = request.app[RUNTIME]
    rid = request.match_info["response_id"]
    ids = parse_response_id(rid)
    missing = NotFound(f"No response found with id {rid[:80]!r}.", code="response_not_found")
    if ids is None:
        raise missing
    session_id, turn_id = ids
    try:
        record = await runtime.get_session(tenant_id, session_id)
    except NotFound:
        raise missing from None
    if not who.may_see("session", session_id, record.owner):
        raise missing
    messages = await _turn_messages(runtime.store, tenant_id, session_id, turn_id)
    if not messages:
        raise missing
    model = runtime.sessions.reported_agent(record) or runtime.settings.default_model
    answer = next((m for m in messages if m.role == "assistant"), None)
    created_s = messages[0].created_at_ms // 1000
    if answer is None:
        return json_response(response_object(rid, created_s, model, "in_progress", None))
    status = "completed" if answer.status == "completed" else answer.status
    error = None if status == "completed" else {"code": status, "message": f"the turn ended {status}"}
    usage = answer.usage or {}
    return json_response(response_object(rid, created_s, model, status, answer.content, usage=usage, error=error))


async def _turn_messages(store: Store, tenant_id: str, session_id: str, turn_id: str) -> list[MessageRecord]:
    """The turn's messages, paging through the session's transcript (ordered by id)."""
    after, found = 0, list[MessageRecord]()
    while page := await store.list_messages(tenant_id, session_id, after=after, limit=500):
        found += [m for m in page if m.turn_id == turn_id]
        if found and page[-1].turn_id != turn_id:
            break
        after = page[-1].message_id
    return found
