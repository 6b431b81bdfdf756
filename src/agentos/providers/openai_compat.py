"""The client for OpenAI-compatible `/chat/completions` streams, on aiohttp.

aiohttp rather than httpx: at 1000 concurrent streams on two cores its client spends a
fraction of httpx's CPU per stream (docs/benchmarking.md). Every aiohttp and timeout error is
translated here, once, into the `ProviderError` tree; nothing above this module sees aiohttp.

Timeouts: `connect_timeout_s` for the TCP connect, `first_token_timeout_s` from the request to
the first content, `idle_timeout_s` between chunks after that, `total_timeout_s` for the whole
stream. 429 and 5xx answers, and connection failures, are retried before the first token while
`max_retries` and `retry_budget_s` allow, honouring Retry-After.

The embeddings client (`agentos.knowledge.embeddings`) calls the same provider: it reuses
`RetryPolicy`, `http_error` and `connection_errors` from here, so both map errors and retry
one way.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
import msgspec

from agentos.config import NamedProvider, ProviderConfig, Route
from agentos.errors import (
    ProviderError,
    ProviderHTTPError,
    ProviderProtocolError,
    ProviderTimeout,
    ProviderUnavailable,
)
from agentos.providers.base import ChatRequest, Completion, StreamItem, TextDelta, ToolCall, Usage
from agentos.providers.sse_parser import SSEParser


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


def new_client_session(config: ProviderConfig | NamedProvider) -> aiohttp.ClientSession:
    # No connection cap here: the kernel's permits are the one limit on concurrent streams.
    connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300, keepalive_timeout=30)
    timeout = aiohttp.ClientTimeout(total=None, connect=config.connect_timeout_s, sock_connect=config.connect_timeout_s)
    return aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=True)


def parse_retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP-date: fall back to our own backoff


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


class _Watchdog:
    """One timer per stream, re-armed lazily: `extend()` only moves the deadline."""

    __slots__ = ("_loop", "_response", "_deadline", "_armed_at", "_handle", "fired", "phase")

    def __init__(self, loop: asyncio.AbstractEventLoop, response: aiohttp.ClientResponse, deadline: float) -> None:
        self._loop = loop
        self._response = response
        self._deadline = deadline
        self.fired = False
        self.phase = "first_token"
        self._handle: asyncio.TimerHandle | None = None
        self._arm(deadline)

    def _arm(self, when: float) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._armed_at = when
        self._handle = self._loop.call_at(when, self._fire)

    def extend(self, deadline: float) -> None:
        """Move the deadline; re-arm only when it comes earlier than the armed timer."""
        self.phase = "idle"
        self._deadline = deadline
        if deadline < self._armed_at:
            self._arm(deadline)

    def _fire(self) -> None:
        self._handle = None
        if self._loop.time() < self._deadline:
            self._arm(self._deadline)
            return
        self.fired = True
        self._response.close()

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


log = logging.getLogger("agentos.providers")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a call to the provider is retried: a retryable `ProviderError` (429, 5xx, a
    connection failure) up to `max_retries` times while `budget_s` allows. The wait is the
    provider's Retry-After (at most `max_wait_s`) or `base_s * 2**attempt` (at most
    `max_backoff_s`), with up to 10% jitter so that many callers retrying together do not
    stampede."""

    max_retries: int
    budget_s: float = math.inf
    base_s: float = 0.1
    max_backoff_s: float = 2.0
    max_wait_s: float = math.inf

    def delay_s(self, error: ProviderError, attempt: int) -> float:
        """The wait before retry number `attempt` (1 for the first)."""
        if error.retry_after_s is not None:
            delay = min(self.max_wait_s, error.retry_after_s)
        else:
            delay = min(self.max_backoff_s, self.base_s * 2**attempt)
        return delay * (1 + random.random() * 0.1)

    async def call(self, attempt: Callable[[], Awaitable[T]], *, what: str = "") -> T:
        """`attempt()`'s result, retried as the policy says; the last error when it gives up.
        `what` names the call in a log line per retry (none when empty)."""
        loop = asyncio.get_running_loop()
        start, tries = loop.time(), 0
        while True:
            try:
                return await attempt()
            except ProviderError as error:
                tries += 1
                delay = self.delay_s(error, tries)
                if not error.retryable or tries > self.max_retries or loop.time() - start + delay > self.budget_s:
                    raise
                if what:
                    log.info("%s: %s; retry %d of %d in %.1fs", what, error, tries, self.max_retries, delay)
            await asyncio.sleep(delay)


@contextmanager
def connection_errors() -> Iterator[None]:
    """A connection that failed or broke, as the retryable `ProviderUnavailable`."""
    try:
        yield
    except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, OSError) as exc:
        raise ProviderUnavailable(f"cannot reach the provider: {exc}", retryable=True) from None


async def http_error(response: aiohttp.ClientResponse) -> ProviderError:
    """An error answer as a `ProviderHTTPError` (retryable for 429 and 5xx) with the start of its
    body and its Retry-After; the response is closed."""
    try:
        detail = (await response.content.read(2048)).decode("utf-8", errors="replace")
    except aiohttp.ClientError:
        detail = ""
    finally:
        response.close()
    retry_after = parse_retry_after(response.headers.get("Retry-After"))
    message = f"provider answered HTTP {response.status}: {detail[:200]}".rstrip(": ")
    return ProviderHTTPError(response.status, message, retry_after_s=retry_after)


class OpenAICompatProvider:
    """The `openai` wire: chat completions, streamed."""

    @classmethod
    def for_route(cls, route: Route, session: aiohttp.ClientSession | None = None) -> OpenAICompatProvider:
        """The client of one router target (`agentos.providers.wires.client_for`)."""
        p = route.provider
        config = ProviderConfig(
            url=p.url,
            model=route.model,
            api_key=route.api_key,
            connect_timeout_s=p.connect_timeout_s,
            first_token_timeout_s=p.first_token_timeout_s,
            idle_timeout_s=p.idle_timeout_s,
            total_timeout_s=p.total_timeout_s,
            max_retries=p.max_retries,
            retry_budget_s=p.retry_budget_s,
            max_tokens=route.max_tokens,
        )
        return cls(config, session)

    def __init__(self, config: ProviderConfig, session: aiohttp.ClientSession | None = None) -> None:
        self._config = config
        self._session = session or new_client_session(config)
        self._owns_session = session is None
        self._retries = RetryPolicy(max_retries=config.max_retries, budget_s=config.retry_budget_s)
        self._url = config.url.rstrip("/") + "/chat/completions"
        self._headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if config.api_key:
            self._headers["Authorization"] = f"Bearer {config.api_key}"

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
        loop = asyncio.get_running_loop()
        start = loop.time()
        total_deadline = start + self._config.total_timeout_s
        first_deadline = min(start + self._config.first_token_timeout_s, total_deadline)
        try:
            async with asyncio.timeout_at(first_deadline):
                response = await self._open(self._body(request), retry=request.retry, headers=request.headers)
        except TimeoutError:
            raise ProviderTimeout("provider first_token timeout (no response)") from None
        # A watchdog closes the response at its deadline rather than cancelling a task: this
        # generator yields to its consumer, so a cancel-based timeout could hit the consumer.
        watchdog = _Watchdog(loop, response, first_deadline)
        text: list[str] = []
        tools = _ToolCallAccumulator()
        usage = _Usage()
        finish = None
        try:
            async for chunk in self._chunks(response):
                delta, finish, usage = self._apply(chunk, tools, finish, usage)
                if delta:
                    watchdog.extend(min(loop.time() + self._config.idle_timeout_s, total_deadline))
                    text.append(delta)
                    yield TextDelta(delta)
            if watchdog.fired:
                raise ProviderTimeout(f"provider {watchdog.phase} timeout")
            if finish is None:
                raise ProviderProtocolError("the stream ended without a finish_reason")
            await self._drain(response)
        except aiohttp.ClientError as exc:
            if watchdog.fired:
                raise ProviderTimeout(f"provider {watchdog.phase} timeout") from None
            raise ProviderProtocolError(f"provider stream broke: {exc.__class__.__name__}") from None
        finally:
            watchdog.cancel()
            response.close()  # a no-op after release(); aborts the upstream otherwise
        yield Completion("".join(text), finish, Usage(usage.prompt_tokens, usage.completion_tokens), tools.result())

    @staticmethod
    async def _drain(response: aiohttp.ClientResponse) -> None:
        """Read past [DONE] to the end of the body: only a fully read response returns its
        connection to the pool, and a new connect per turn costs more than the whole turn."""
        try:
            await response.read()
        except aiohttp.ClientError:
            return  # the answer is whole; the connection just cannot be reused
        response.release()

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

    async def _chunks(self, response: aiohttp.ClientResponse) -> AsyncIterator[_Chunk]:
        parser = SSEParser()
        async for raw in response.content.iter_any():
            for event in parser.feed(raw):
                if event.data == "[DONE]":
                    return
                try:
                    yield _decode_chunk(event.data)
                except msgspec.DecodeError:
                    raise ProviderProtocolError("the provider sent a chunk that is not valid JSON") from None

    async def _open(
        self, body: bytes, *, retry: bool = True, headers: dict[str, str] | None = None
    ) -> aiohttp.ClientResponse:
        """POST the request, retrying 429, 5xx and connection failures within the budget."""
        sent = self._headers if not headers else {**self._headers, **headers}
        if not retry:
            return await self._post(body, sent)
        return await self._retries.call(lambda: self._post(body, sent))

    async def _post(self, body: bytes, headers: dict[str, str]) -> aiohttp.ClientResponse:
        with connection_errors():
            response = await self._session.post(self._url, data=body, headers=headers)
        if response.status >= 400:
            raise await http_error(response)
        return response
