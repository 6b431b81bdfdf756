"""The OpenAI-compatible front door: `GET /v1/models` and `POST /v1/chat/completions`.

A chat completion is a turn of a session (`agentos.api.openai_turns` says which), run by the
same machinery as `POST /v1/sessions/{id}/turns`, with the same checks in the same order: the
key, the rate, the scope (`sessions:write`), the admission gate before the body is read, then
the body, the quotas, the session. Streamed (`"stream": true`), the turn's events become
`chat.completion.chunk` lines as they come; otherwise the answer is one `chat.completion`.
docs/openai.md has the mapping and what is not supported.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from aiohttp import web

from agentos.api import openai_run
from agentos.api.keys import RUNS
from agentos.api.openai_errors import BAD_BODY, TURN_ERRORS, openai_error
from agentos.api.openai_turns import SESSION_HEADER, InvalidParam, open_turn, plain_model, plan_turn, resolve_model
from agentos.api.openai_wire import ChatCompletionCreate, ChunkWriter, completion, error_body, error_line, model_entry
from agentos.api.routes import Schema, header, json, obj, tagged
from agentos.api.sessions import json_response
from agentos.clock import wall_ms
from agentos.ids import SESSION_ID
from agentos.runtime.turn import Turn
from agentos.tenancy.principal import Scope, require

routes = web.RouteTableDef()
operation = tagged("openai")

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
    parameters=(
        header(
            SESSION_HEADER, "Continue this session of the caller: the last message is the new turn (docs/openai.md)"
        ),
    ),
    body=ChatCompletionCreate,
    answers=openai_run.turn_answer(
        "The completion; with `stream: true`, `chat.completion.chunk` data lines, then [DONE]", _COMPLETION
    ),
    errors=BAD_BODY | TURN_ERRORS,
    limits=openai_run.TURN_LIMITS,
)
async def chat_completions(request: web.Request) -> web.StreamResponse:
    who, body = await openai_run.read_turn_request(request, ChatCompletionCreate)
    if body.n != 1:
        raise InvalidParam("n", "only n=1 is supported")
    agent = await resolve_model(request.app, who.tenant_id, body.model)
    session_id = _session_id(request, body.user)
    plan = replace(
        plan_turn(body.messages, body.tools, agent=agent, stateful=session_id is not None), on_busy=body.on_busy
    )
    turn = await open_turn(request, who, agent, session_id, plan)
    head = (f"chatcmpl-{turn.turn_id}", wall_ms() // 1000, body.model)
    if not body.stream:
        return await _whole(request, turn, *head)
    include_usage = body.stream_options is not None and body.stream_options.include_usage
    writer, by_agent = ChunkWriter(*head, include_usage), turn.agent is not None
    return await openai_run.stream_turn(request, turn, lambda response: ChunkStream(response, writer, agent=by_agent))


def _session_id(request: web.Request, user: str | None) -> str | None:
    """The session a request continues: `X-Session-Id`, else `user` when it has a session id's form.

    Other `user` values name an end user (OpenAI's meaning: one user has many conversations)
    and pick nothing, so clients that fill it in for abuse monitoring keep working.
    """
    if (header := request.headers.get(SESSION_HEADER)) is not None:
        return header
    return user if user is not None and SESSION_ID.fullmatch(user) else None


async def _whole(request: web.Request, turn: Turn, completion_id: str, created_s: int, model: str) -> web.Response:
    name, data, text = await openai_run.collect_turn(request, turn)
    if name != "turn.completed":
        return openai_error(*openai_run.turn_failure(name, data))
    response = json_response(completion(completion_id, created_s, model, text, data))
    response.headers[SESSION_HEADER] = turn.session_id
    return response


class ChunkStream(openai_run.OpenAIStream):
    """A turn sink writing `chat.completion.chunk` lines, ended by an error line and `[DONE]`
    on a failure."""

    __slots__ = ("_writer", "_agent", "_streamed")

    def __init__(self, response: web.StreamResponse, writer: ChunkWriter, *, agent: bool) -> None:
        super().__init__(response)
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
            status, code, message = openai_run.turn_failure(name, data)
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

    def failure_line(self, body: dict[str, Any]) -> bytes:
        return error_line(body)
