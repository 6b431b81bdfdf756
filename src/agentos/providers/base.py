"""The provider contract: what the runtime asks of an OpenAI-compatible chat model.

`Provider.stream(request)` is an async iterator of `TextDelta`s followed by exactly one
`Completion`. It raises `agentos.errors.ProviderError` subclasses, and closing the iterator
early (`aclose()`, or cancelling the task that iterates it) aborts the upstream request.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any, Protocol

Message = dict[str, Any]  # an OpenAI chat message: {"role": ..., "content": ..., "tool_calls"?: ...}


@dataclass(frozen=True, slots=True)
class ChatRequest:
    messages: list[Message]
    model: str | None = None  # None: the provider's configured model
    tools: list[dict[str, Any]] | None = None  # OpenAI "tools" entries
    max_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0


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
