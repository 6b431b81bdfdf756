"""The OpenAI-compatible front door: `GET /v1/models` and `POST /v1/chat/completions`.

A chat completion is a turn of a session (`agentos.api.openai_turns` says which), run by the
same machinery as `POST /v1/sessions/{id}/turns`, with the same checks in the same order: the
key, the rate, the scope (`sessions:write`), the admission gate before the body is read, then
the body, the quotas, the session. Streamed (`"stream": true`), the turn's events become
`chat.completion.chunk` lines as they come; otherwise the answer is one `chat.completion`.
docs/openai.md has the mapping and what is not supported.
"""

from __future__ import annotations

from contextlib import suppress
from typing import Any

from aiohttp import web

from agentos.api.admission import ADMISSION
from agentos.api.body import read_body
from agentos.api.errors import INTERNAL_MESSAGE, STARTED, log_internal_error
from agentos.api.keys import RUNS, RUNTIME
from agentos.api.openai_errors import BAD_BODY, SESSION_ANSWERED, TURN_ERRORS, TURN_LIMITS_429, TURN_QUOTA, openai_error
from agentos.api.openai_turns import SESSION_HEADER, InvalidParam, open_turn, plain_model, plan_turn, resolve_model
from agentos.api.openai_wire import ChatCompletionCreate, ChunkWriter, completion, error_body, error_line, model_entry
from agentos.api.routes import SERVER_SENT_EVENT, SSE, Answer, Limits, Schema, header, json, obj, operation
from agentos.api.sessions import json_response
from agentos.api.sse import SSE_HEADERS
from agentos.clock import wall_ms
from agentos.errors import RequestError, StoreUnavailable
from agentos.ids import SESSION_ID
from agentos.runtime.turn import CollectingSink, Turn
from agentos.tenancy.principal import Scope, require

routes = web.RouteTableDef()

# As much of OpenAI's objects as Agent OS fills (`agentos.api.openai_wire`).
_MODEL_LIST = Schema.object(
    "ModelList",
    {
        "object": {"const": "list"},
        "data": {
            "type": "array",
            "items": obj(
                {
                    "id": {"type": "string"},
                    "object": {"const": "model"},
                    "created": {"type": "integer"},
                    "owned_by": {"type": "string"},
                }
            ),
        },
    },
)
_COMPLETION = Schema.object(
    "ChatCompletion",
    {
        "id": {"type": "string"},
        "object": {"const": "chat.completion"},
        "created": {"type": "integer"},
        "model": {"type": "string"},
        "choices": {
            "type": "array",
            "items": {"type": "object", "required": ["index", "message", "finish_reason"]},
        },
        "usage": {"type": "object", "required": ["prompt_tokens", "completion_tokens", "total_tokens"]},
    },
)


@routes.get("/v1/models")
@operation(
    "The caller's agents, and the provider's model for plain chat turns, as OpenAI models",
    tag="openai",
    answers={200: json("The models", _MODEL_LIST)},
)
async def list_models(request: web.Request) -> web.Response:
    """The caller's agents, then the provider's model while it names the plain chat turn."""
    tenant_id = require(request, Scope.AGENTS_READ).tenant_id
    runs = request.app[RUNS]
    await runs.sync_agents(tenant_id, only_changed=True)  # no read unless another node changed them
    data = [model_entry(a["name"], 0, _owner(a, tenant_id)) for a in runs.list_agents(tenant_id)]
    if (plain := plain_model(request.app, tenant_id)) is not None:
        data.append(model_entry(plain, 0, "agentos"))
    return json_response({"object": "list", "data": data})


def _owner(agent: dict[str, Any], tenant_id: str) -> str:
    return "agentos" if agent.get("source") == "config" else tenant_id


@routes.post("/v1/chat/completions")
@operation(
    "A turn of a session as an OpenAI chat completion (docs/openai.md)",
    tag="openai",
    parameters=(
        header(
            SESSION_HEADER, "Continue this session of the caller: the last message is the new turn (docs/openai.md)"
        ),
    ),
    body=ChatCompletionCreate,
    answers={
        200: Answer(
            description="The completion; with `stream: true`, `chat.completion.chunk` data lines, then [DONE]",
            content={"application/json": _COMPLETION, SSE: SERVER_SENT_EVENT},
            headers=SESSION_ANSWERED,
        )
    },
    errors=BAD_BODY | TURN_ERRORS,
    limits=Limits(more_429=TURN_LIMITS_429, quota=TURN_QUOTA),
)
async def chat_completions(request: web.Request) -> web.StreamResponse:
    who = require(request, Scope.SESSIONS_WRITE)
    request.app[ADMISSION].offer(who, "turn")  # a refusal reads no body, as for a native turn
    body = await read_body(request, ChatCompletionCreate)
    if body.n != 1:
        raise InvalidParam("n", "only n=1 is supported")
    agent = await resolve_model(request.app, who.tenant_id, body.model)
    session_id = _session_id(request, body.user)
    plan = plan_turn(body.messages, body.tools, agent=agent, stateful=session_id is not None)
    turn = await open_turn(request, who, agent, session_id, plan)
    head = (f"chatcmpl-{turn.turn_id}", wall_ms() // 1000, body.model)
    if not body.stream:
        return await _whole(request, turn, *head)
    include_usage = body.stream_options is not None and body.stream_options.include_usage
    return await _streamed(request, turn, ChunkWriter(*head, include_usage))


def _session_id(request: web.Request, user: str | None) -> str | None:
    """The session a request continues: `X-Session-Id`, else `user` when it has a session id's form.

    Other `user` values name an end user (OpenAI's meaning: one user has many conversations)
    and pick nothing, so clients that fill it in for abuse monitoring keep working.
    """
    if (header := request.headers.get(SESSION_HEADER)) is not None:
        return header
    return user if user is not None and SESSION_ID.fullmatch(user) else None


async def _whole(request: web.Request, turn: Turn, completion_id: str, created_s: int, model: str) -> web.Response:
    sink = CollectingSink()
    await request.app[RUNTIME].run_turn(turn, sink)
    _, name, data = sink.events[-1]
    if name != "turn.completed":
        return _turn_error(name, data)
    tokens = "".join(d["delta"] for _, n, d in sink.events if n == "token")
    text = str(data["result"]) if "result" in data else tokens  # an agent's answer is its result
    response = json_response(completion(completion_id, created_s, model, text, data))
    response.headers[SESSION_HEADER] = turn.session_id
    return response


def _turn_error(name: str, data: dict[str, Any]) -> web.Response:
    status, code, message = turn_failure(name, data)
    return openai_error(status, code, message)


def turn_failure(name: str, data: dict[str, Any]) -> tuple[int, str, str]:
    """Status, code and message of a turn that did not complete."""
    reason = str(data.get("reason", "internal_error"))
    message = str(data.get("message") or f"the turn ended {name.removeprefix('turn.')}: {reason}")
    if name == "turn.cancelled":
        return (503, reason, message) if reason == "shutdown" else (409, reason, message)
    if reason.startswith("provider"):
        return 502, reason, message
    return (503, reason, message) if reason == "store_unavailable" else (500, reason, message)


async def _streamed(request: web.Request, turn: Turn, writer: ChunkWriter) -> web.StreamResponse:
    runtime = request.app[RUNTIME]
    response = web.StreamResponse(headers={**SSE_HEADERS, SESSION_HEADER: turn.session_id})
    try:
        await response.prepare(request)
    except BaseException:
        await runtime.run_turn(turn, GoneSink())  # record it as cancelled; never leave it admitted
        raise
    stream = ChunkStream(response, writer, agent=turn.agent is not None)
    request[STARTED] = stream
    await runtime.run_turn(turn, stream)
    await stream.close()
    return response


class GoneSink:
    async def send(self, event_id: str, name: str, data: dict[str, Any]) -> None:
        raise ConnectionResetError("the client went away before the stream started")


class ChunkStream:
    """A turn sink writing `chat.completion.chunk` lines; also the request's started response
    (`agentos.api.errors.STARTED`): a failure after the headers left ends it with an error
    line and `[DONE]`, never a second status line."""

    __slots__ = ("ended", "response", "_writer", "_agent", "_streamed")

    def __init__(self, response: web.StreamResponse, writer: ChunkWriter, *, agent: bool) -> None:
        self.response = response
        self.ended = False
        self._writer = writer
        self._agent = agent
        self._streamed = False  # any content sent: an agent's result is then not sent again

    async def send(self, event_id: Any, name: str, data: dict[str, Any]) -> None:
        if name == "turn.started":
            line = self._writer.chunk({"role": "assistant", "content": ""})
        elif name == "token" and data.get("delta"):
            self._streamed = True
            line = self._writer.chunk({"content": data["delta"]})
        elif name == "turn.completed":
            line = self._completed(data)
        elif name in ("turn.failed", "turn.cancelled"):
            self.ended = True
            status, code, message = turn_failure(name, data)
            line = error_line(error_body(status, code, message))
        else:  # tool activity of an agent, human requests: the agent's business, not the client's
            return
        await self.response.write(line)

    def _completed(self, data: dict[str, Any]) -> bytes:
        self.ended = True
        result = data.get("result")
        # An agent whose answer came without tokens (a replayed step) still sends its text.
        content = self._writer.chunk({"content": result}) if self._agent and result and not self._streamed else b""
        return content + self._writer.end(data)

    async def close(self) -> None:
        with suppress(ConnectionError):
            await self.response.write_eof()

    async def end_with_failure(self, exc: Exception) -> web.StreamResponse:
        if not isinstance(exc, ConnectionError) and not self.ended:
            with suppress(ConnectionError):
                await self.response.write(error_line(failure_body(exc)))
        await self.close()
        return self.response


def failure_body(exc: Exception) -> dict[str, Any]:
    if isinstance(exc, RequestError):
        return error_body(exc.status, exc.code, exc.message)
    if isinstance(exc, StoreUnavailable):
        return error_body(503, exc.code, "the store cannot be reached; retry later")
    error_id = log_internal_error("a chat completion stream failed after it started")
    return error_body(500, "internal_error", f"{INTERNAL_MESSAGE} (error_id {error_id})")
