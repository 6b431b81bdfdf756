"""The client for OpenAI-compatible `/chat/completions` streams, on aiohttp.

aiohttp rather than httpx: at 1000 concurrent streams on two cores its client spends a
fraction of httpx's CPU per stream (docs/benchmarking.md). Deadlines, retries, error mapping and
draining are `agentos.providers.transport`'s, shared with the other wires; this module is the
chat-completions translation only, and its per-chunk path is benchmarked: keep it lean.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

import aiohttp
import msgspec

from agentos.config import ProviderConfig, Route
from agentos.errors import ProviderProtocolError
from agentos.providers.base import ChatRequest, Completion, StreamItem, TextDelta, ToolCall, Usage
from agentos.providers.transport import RetryPolicy, Upstream, new_client_session


class _Function(msgspec.Struct):
    name: str | None = None
    arguments: str | None = None


class _ToolCallDelta(msgspec.Struct):
    index: int = 0
    id: str | None = None
    function: _Function | None = None


class _Delta(msgspec.Struct):
    content: str | None = None
    tool_calls: list[_ToolCallDelta] | None = None


class _Choice(msgspec.Struct):
    delta: _Delta | None = None
    finish_reason: str | None = None


class _Usage(msgspec.Struct):
    prompt_tokens: int = 0
    completion_tokens: int = 0


class _Chunk(msgspec.Struct):
    choices: list[_Choice] = []
    usage: _Usage | None = None


_decode_chunk = msgspec.json.Decoder(_Chunk).decode
_encode = msgspec.json.encode


class _ToolCallAccumulator:
    __slots__ = ("_calls",)

    def __init__(self) -> None:
        self._calls: dict[int, list[str]] = {}

    def add(self, deltas: list[_ToolCallDelta]) -> None:
        for d in deltas:
            call = self._calls.setdefault(d.index, ["", "", ""])
            if d.id:
                call[0] = d.id
            if d.function is not None:
                call[1] += d.function.name or ""
                call[2] += d.function.arguments or ""

    def result(self) -> tuple[ToolCall, ...]:
        return tuple(ToolCall(c[0] or f"call_{i}", c[1], c[2]) for i, c in sorted(self._calls.items()))


class OpenAICompatProvider:
    """The `openai` wire: chat completions, streamed."""

    @classmethod
    def for_route(cls, route: Route, session: aiohttp.ClientSession | None = None) -> OpenAICompatProvider:
        """The client of one router target (`agentos.providers.wires.client_for`)."""
        shared = route.provider.upstream() | {"api_key": route.api_key, "max_tokens": route.max_tokens}
        return cls(ProviderConfig(url=route.provider.url, model=route.model, **shared), session)

    def __init__(self, config: ProviderConfig, session: aiohttp.ClientSession | None = None) -> None:
        self._config = config
        self._session = session or new_client_session(config)
        self._owns_session = session is None
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if config.api_key:
            headers["Authorization"] = f"Bearer {config.api_key}"
        retries = RetryPolicy(max_retries=config.max_retries, budget_s=config.retry_budget_s)
        url = config.url.rstrip("/") + "/chat/completions"
        self._upstream = Upstream(self._session, url, headers, timeouts=config, retries=retries)

    async def aclose(self) -> None:
        if self._owns_session:
            await self._session.close()

    def _body(self, request: ChatRequest) -> bytes:
        body: dict[str, Any] = {
            "model": request.model or self._config.model,
            "messages": request.messages,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.params:
            body.update(request.params)
        if request.tools:
            body["tools"] = request.tools
        max_tokens = request.max_tokens or self._config.max_tokens
        if max_tokens:
            body["max_tokens"] = max_tokens
        return _encode(body)

    async def stream(self, request: ChatRequest) -> AsyncGenerator[StreamItem, None]:
        upstream = await self._upstream.open(self._body(request), retry=request.retry, headers=request.headers)
        watchdog = upstream.watchdog
        text: list[str] = []
        tools = _ToolCallAccumulator()
        usage = _Usage()
        finish = None
        with upstream.guard():
            async for chunk in upstream.events(_decode_chunk):
                delta, finish, usage = self._apply(chunk, tools, finish, usage)
                if delta:
                    watchdog.touch()
                    text.append(delta)
                    yield TextDelta(delta)
            upstream.check_timeout()
            if finish is None:
                raise ProviderProtocolError("the stream ended without a finish_reason")
            await upstream.drain()
        yield Completion("".join(text), finish, Usage(usage.prompt_tokens, usage.completion_tokens), tools.result())

    @staticmethod
    def _apply(
        chunk: _Chunk, tools: _ToolCallAccumulator, finish: str | None, usage: _Usage
    ) -> tuple[str, str | None, _Usage]:
        delta = ""
        for choice in chunk.choices:
            if choice.delta is not None:
                delta += choice.delta.content or ""
                if choice.delta.tool_calls:
                    tools.add(choice.delta.tool_calls)
            finish = choice.finish_reason or finish
        return delta, finish, chunk.usage or usage
