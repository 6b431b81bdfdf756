"""From an OpenAI request to a turn: which agent `model` names, which session, what the model sees.

- `model` is an agent the caller sees (a config agent or its tenant's own), or the provider's
  model for the plain chat turn (listed, and accepted, only while no agent named `default`
  exists: then every session without an agent runs that agent). Anything else is a 404
  `model_not_found`, another tenant's agent included.
- The session: `X-Session-Id` names one of the caller's sessions, and only the request's last
  message (a user message) is the new turn: the session's transcript is the history, the
  request's earlier messages are not read. Without it, each request is a conversation of its
  own: a new session, and the model sees the request's messages as sent (OpenAI's stateless
  contract). The session's id comes back in the `X-Session-Id` header either way. The session
  is never guessed from the messages, nor from `user` (an end-user id, not a conversation).
- A client's own `tools` (and `tool` messages) are passed to the model of a plain chat turn in
  the stateless mode, and its tool calls come back as `tool_calls` for the client to run. An
  agent runs its own tools: `tools` with an agent is a 400 (`param: tools`).
"""

from __future__ import annotations

from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from agentos.api.admission import ADMISSION
from agentos.api.keys import QUOTAS, RUNS, RUNTIME
from agentos.api.openai_wire import ChatMessage, text_of
from agentos.api.owners import check_session
from agentos.errors import BadRequest, NotFound, StoreUnavailable
from agentos.kernel import OnBusy
from agentos.providers.base import Message
from agentos.runtime.runtime import DEFAULT_AGENT
from agentos.runtime.turn import Turn, check_input
from agentos.tenancy.principal import Principal

SESSION_HEADER = "X-Session-Id"
_METADATA = {"created_by": "openai"}


class InvalidParam(BadRequest):
    """A 400 naming the request field at fault (OpenAI's `param`)."""

    code = "invalid_request_error"

    def __init__(self, param: str, message: str, *, code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.param = param


@dataclass(frozen=True, slots=True)
class TurnPlan:
    """What a request asks: the turn's input text, and (stateless) the model's conversation."""

    text: str
    prompt: list[Message] | None
    tools: list[dict[str, Any]] | None
    on_busy: OnBusy | None = None  # the chat completions extension field


def plain_model(app: web.Application, tenant_id: str) -> str | None:
    """The provider's model id while it names the plain chat turn for this tenant."""
    runs = app[RUNS]
    return None if runs.has_agent(tenant_id, DEFAULT_AGENT) else app[RUNTIME].settings.default_model


async def resolve_model(app: web.Application, tenant_id: str, model: str) -> str | None:
    """The agent `model` names; None: the plain chat turn.

    Raises: NotFound `model_not_found` (also for another tenant's agent).
    """
    runs = app[RUNS]
    await runs.sync_agents(tenant_id, only_changed=True)  # no read unless another node changed them
    if not runs.has_agent(tenant_id, model) and model == plain_model(app, tenant_id):
        return None
    if await runs.sees_agent(tenant_id, model):  # a miss is read again: made elsewhere a moment ago?
        return model
    message = f"The model {model!r} does not exist or you do not have access to it."
    raise NotFound(message, code="model_not_found")


def plan_turn(
    messages: list[ChatMessage], tools: list[dict[str, Any]] | None, *, agent: str | None, stateful: bool
) -> TurnPlan:
    """Check the request's messages and tools against the mode, and plan the turn.

    Raises: InvalidParam (`messages`, `tools`).
    """
    if not messages:
        raise InvalidParam("messages", "messages must hold at least one message")
    if tools and (agent is not None or stateful):
        where = f"agent {agent!r} runs its own tools" if agent is not None else f"a session ({SESSION_HEADER})"
        raise InvalidParam("tools", f"client tools are not supported with {where}; see docs/openai.md")
    prompt = [_message(m, i) for i, m in enumerate(messages)]
    last = messages[-1]
    allowed = ("user",) if stateful or agent is not None else ("user", "tool")
    if last.role not in allowed:
        raise InvalidParam("messages", f"the last message must have the role {' or '.join(allowed)}")
    if agent is not None and any(m["role"] == "tool" or m.get("tool_calls") for m in prompt):
        raise InvalidParam("messages", f"agent {agent!r} runs its own tools: no tool calls or tool messages")
    text = str(prompt[-1]["content"] or "")
    return TurnPlan(text, None if stateful else prompt, tools or None)


def _message(m: ChatMessage, i: int) -> Message:
    text = text_of(m.content)
    if text is None:
        raise InvalidParam(f"messages[{i}].content", "only text content is supported")
    role = "system" if m.role == "developer" else m.role
    message: Message = {"role": role, "content": text}
    if m.role == "assistant" and m.tool_calls:
        message["tool_calls"] = m.tool_calls
        message["content"] = text or None
    if m.role == "tool":
        if not m.tool_call_id:
            raise InvalidParam(f"messages[{i}].tool_call_id", "a tool message needs its tool_call_id")
        message["tool_call_id"] = m.tool_call_id
    return message


async def open_turn(
    request: web.Request, who: Principal, agent: str | None, session_id: str | None, plan: TurnPlan
) -> Turn:
    """Admit the turn: in `session_id` (which the model's agent must run), or in a new session.

    Raises: SessionNotFound, InvalidParam (`model`: the session runs another agent),
    QuotaExceeded, RateLimited, AdmissionRejected, ShuttingDown, InvalidInput.
    """
    runtime = request.app[RUNTIME]
    check_input(plan.text, runtime.settings.kernel.max_input_chars)
    if session_id is not None:
        await check_session(runtime, who, session_id)  # a user continues only its own conversation
        runs_it = await runtime.sessions.agent_running(who.tenant_id, session_id)  # no store read when in memory
        if runs_it != agent:
            raise InvalidParam("model", f"session {session_id!r} runs {runs_it or 'the plain chat turn'!r}")
        return await _start(request, who, session_id, plan)
    session_id = await _new_session(request, who, agent)
    try:
        return await _start(request, who, session_id, plan)
    except Exception:  # refused (the gate, a rate): the conversation's session would stay empty
        with suppress(StoreUnavailable):
            await runtime.delete_session(who.tenant_id, session_id)
            request.app[QUOTAS].release_session(who.tenant_id)
        raise


async def _start(request: web.Request, who: Principal, session_id: str, plan: TurnPlan) -> Turn:
    async with request.app[ADMISSION].starting(who, "turn", plan.text) as started:
        runtime = request.app[RUNTIME]
        turn = await runtime.start_turn(
            who.tenant_id,
            session_id,
            plan.text,
            prompt=plan.prompt,
            tools=plan.tools,
            key_id=who.key_id or "",
            user_max_turns=who.limits.user_max_concurrent_turns,
            on_busy=plan.on_busy,
        )
        started.bind(turn.turn_id, turn.session_id)  # an agent's turn: its run's calls carry the session
        return turn


async def _new_session(request: web.Request, who: Principal, agent: str | None) -> str:
    quotas = request.app[QUOTAS]
    await quotas.admit_session(who)  # counted before creating, as POST /v1/sessions does
    try:
        record = await request.app[RUNTIME].create_session(who.tenant_id, agent, dict(_METADATA), owner=who.subject)
    except BaseException:
        quotas.release_session(who.tenant_id)
        raise
    return record.session_id
