"""The provider contract: what the runtime asks of a chat model, whatever wire it speaks.

`Provider.stream(request)` is an async iterator of `TextDelta`s followed by exactly one
`Completion`. It raises `agentos.errors.ProviderError` subclasses, and closing the iterator
early (`aclose()`, or cancelling the task that iterates it) aborts the upstream request.

This is the one normalized stream inside Agent OS: messages and tools are OpenAI chat shapes,
finish reasons OpenAI's (`stop`, `tool_calls`, `length`, `content_filter`), and each wire client
(`openai_compat`, `openai_responses`, `anthropic`) translates to and from its own wire. The
router (`agentos.providers.router`) is a `Provider` too: it picks the target that answers.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any, Protocol

Message = dict[str, Any]  # an OpenAI chat message: {"role": ..., "content": ..., "tool_calls"?: ...}


@dataclass(frozen=True, slots=True)
class CallContext:
    """Who a model call is for: what the usage ledger and the budgets count it against."""

    tenant_id: str = ""
    key_id: str = ""
    agent: str = ""
    run_id: str = ""
    session_id: str = ""
    # The turn (or run step) the call serves: a budget reservation made at admission under this
    # id is the one the call uses (`agentos.providers.metering.Meter`).
    call_id: str = ""
    # The run's own budget in the operator's currency (its spec's or its request's `max_cost`);
    # 0: none. Carried with each call so that any node that takes the run over applies it.
    max_cost: float = 0.0


@dataclass(frozen=True, slots=True)
class TraceSpec:
    """Where the router's `chat` span of a call goes when its caller decides (a run's model
    step: `agentos.agents.traces`): its parent, its own id, the spans it follows from."""

    parent: str  # a W3C traceparent
    span_id: str
    links: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ChatRequest:
    messages: list[Message]
    model: str | None = None  # None: the default model (the router's) or the client's own
    tools: list[dict[str, Any]] | None = None  # OpenAI "tools" entries
    max_tokens: int | None = None
    context: CallContext | None = None  # None: counted against nobody (the bench, the mock check)
    # Set by the router for the wire client it calls: the target's own parameters (sent as they
    # are), and whether the client may retry before the first token (not when the router has a
    # further target to fall back to: it moves on at once instead).
    params: dict[str, Any] | None = None
    retry: bool = True
    headers: dict[str, str] | None = None  # sent as they are: the trace context (`traceparent`)
    trace: TraceSpec | None = None  # None: the chat span is a child of the current span


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int = 0  # every input token, cached or not
    completion_tokens: int = 0
    cache_read_tokens: int = 0  # of prompt_tokens, read from the provider's prompt cache
    cache_write_tokens: int = 0  # of prompt_tokens, written to it


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ToolCall:
    call_id: str
    name: str
    arguments: str  # the JSON text, exactly as the model produced it


@dataclass(frozen=True, slots=True)
class Completion:
    text: str
    finish_reason: str
    usage: Usage = field(default_factory=Usage)
    tool_calls: tuple[ToolCall, ...] = ()
    target: str = ""  # the target that answered (`provider/model`); empty from a bare wire client
    cost: float | None = None  # its price for this usage; None when the target has no price


StreamItem = TextDelta | Completion


class Provider(Protocol):
    def stream(self, request: ChatRequest) -> AsyncGenerator[StreamItem, None]: ...

    async def aclose(self) -> None: ...


class ProviderPermits(Protocol):
    """The gate every call to the provider passes: a permit from the tenant's fair share of
    the provider's concurrency limit. `agentos.runtime.driver.Driver` is the one in the server;
    callers below the runtime (the knowledge embedder) hold it by this protocol."""

    async def acquire_permit(self, stream_id: str, owner: str | None = None, tenant_id: str = ...) -> None: ...

    def release_permit(self, stream_id: str) -> None: ...
