"""The HTTP mechanics every wire client shares, on aiohttp: open a streamed POST under its
deadlines, retry it before the first byte, read its Server-Sent Events, map every aiohttp and
timeout error into the `ProviderError` tree, and drain the body so the connection is reused.

A wire client (`openai_compat`, `openai_responses`, `anthropic`) owns only its translation:
the body it sends and what it makes of each decoded event. Usage::

    upstream = Upstream(session, url, headers, timeouts=provider, retries=policy)
    stream = await upstream.open(body, retry=request.retry)
    with stream.guard():
        async for event in stream.events(decode):
            ...                      # stream.watchdog.touch() on each piece of content
        stream.check_timeout()
        await stream.drain()

Timeouts, from the upstream's config (`agentos.config.provider.Upstream`): `connect_timeout_s`
for the TCP connect (the session's), `first_token_timeout_s` from the request to the first
content, `idle_timeout_s` between pieces of content after that, `total_timeout_s` for the whole
stream. 429 and 5xx answers, and connection failures, are retried before the first token while
`max_retries` and `retry_budget_s` allow, honouring
Retry-After. The embeddings client (`agentos.knowledge.embeddings`) reuses `RetryPolicy`,
`http_error` and `connection_errors`, so every call to a provider maps errors and retries one way.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import KW_ONLY, dataclass, field
from typing import ClassVar, Generic, Protocol, Self, TypeVar

import aiohttp
import msgspec

from agentos.config import Route
from agentos.config.provider import Upstream as UpstreamConfig
from agentos.errors import ProviderError, ProviderHTTPError, ProviderProtocolError, ProviderTimeout, ProviderUnavailable
from agentos.providers.base import ChatRequest, Completion, StreamItem, TextDelta
from agentos.providers.sse_parser import SSEParser

log = logging.getLogger("agentos.providers")
T = TypeVar("T")
E = TypeVar("E")
E_contra = TypeVar("E_contra", contravariant=True)


def new_client_session(config: UpstreamConfig) -> aiohttp.ClientSession:
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


@dataclass(slots=True, eq=False)
class Watchdog:
    """One timer per stream, re-armed lazily: `touch()` only moves the deadline.

    It closes the response at its deadline rather than cancelling a task: a wire client's
    generator yields to its consumer, so a cancel-based timeout could hit the consumer."""

    loop: asyncio.AbstractEventLoop
    response: aiohttp.ClientResponse
    deadline: float  # the first token's; then `idle_s` after the last content
    _: KW_ONLY
    idle_s: float
    total_deadline: float
    fired: bool = field(init=False, default=False)
    phase: str = field(init=False, default="first_token")
    _handle: asyncio.TimerHandle | None = field(init=False, default=None)
    _armed_at: float = field(init=False, default=0.0)

    def __post_init__(self) -> None:
        self._arm(self.deadline)

    def _arm(self, when: float) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._armed_at = when
        self._handle = self.loop.call_at(when, self._fire)

    def touch(self) -> None:
        """Content arrived: the deadline is now `idle_s` away (never past the total deadline);
        the timer is re-armed only when that comes earlier than the armed one."""
        deadline = self.loop.time() + self.idle_s
        if deadline > self.total_deadline:
            deadline = self.total_deadline
        self.phase = "idle"
        self.deadline = deadline
        if deadline < self._armed_at:
            self._arm(deadline)

    def _fire(self) -> None:
        self._handle = None
        if self.loop.time() < self.deadline:
            self._arm(self.deadline)
            return
        self.fired = True
        self.response.close()

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


class Upstream:
    """One wire's endpoint: a POST that opens a stream, under the provider's deadlines."""

    __slots__ = ("_session", "_url", "_headers", "_timeouts", "_retries")

    def __init__(
        self,
        session: aiohttp.ClientSession,
        url: str,
        headers: Mapping[str, str],
        *,
        timeouts: UpstreamConfig,
        retries: RetryPolicy,
    ) -> None:
        self._session = session
        self._url = url
        self._headers = dict(headers)
        self._timeouts = timeouts
        self._retries = retries

    async def open(self, body: bytes, *, retry: bool = True, headers: dict[str, str] | None = None) -> OpenStream:
        """POST `body` and return the stream once its answer's headers are in; `headers` are
        sent beside the endpoint's own (the trace context).

        Raises:
            ProviderTimeout: no answer before the first-token deadline.
            ProviderHTTPError: an error answer (after the retries `retry` allows).
            ProviderUnavailable: the provider cannot be reached.
        """
        loop = asyncio.get_running_loop()
        start = loop.time()
        total_deadline = start + self._timeouts.total_timeout_s
        first_deadline = min(start + self._timeouts.first_token_timeout_s, total_deadline)
        sent = self._headers if not headers else {**self._headers, **headers}
        try:
            async with asyncio.timeout_at(first_deadline):
                if retry:
                    response = await self._retries.call(lambda: self._post(body, sent))
                else:
                    response = await self._post(body, sent)
        except TimeoutError:
            raise ProviderTimeout("provider first_token timeout (no response)") from None
        idle_s = self._timeouts.idle_timeout_s
        watchdog = Watchdog(loop, response, first_deadline, idle_s=idle_s, total_deadline=total_deadline)
        return OpenStream(response, watchdog)

    async def _post(self, body: bytes, headers: Mapping[str, str]) -> aiohttp.ClientResponse:
        with connection_errors():
            response = await self._session.post(self._url, data=body, headers=headers)
        if response.status >= 400:
            raise await http_error(response)
        return response


class OpenStream:
    """An answer being streamed: its SSE events decoded, its errors mapped, its end checked."""

    __slots__ = ("response", "watchdog")

    def __init__(self, response: aiohttp.ClientResponse, watchdog: Watchdog) -> None:
        self.response = response
        self.watchdog = watchdog

    async def events(self, decode: Callable[[str], T]) -> AsyncIterator[T]:
        """Each SSE event's data, decoded, until the body ends or a `[DONE]` event.

        Raises:
            ProviderProtocolError: an event that `decode` refuses (a `msgspec.DecodeError`).
        """
        parser = SSEParser()
        async for raw in self.response.content.iter_any():
            for event in parser.feed(raw):
                if event.data == "[DONE]":
                    return
                try:
                    yield decode(event.data)
                except msgspec.DecodeError:
                    raise ProviderProtocolError("the provider sent an event that is not valid JSON") from None

    @contextmanager
    def guard(self) -> Iterator[None]:
        """aiohttp errors while reading as `ProviderTimeout` (the watchdog closed the stream) or
        `ProviderProtocolError`; on the way out the timer stops and the response is closed (a
        no-op after `drain()`, an abort of the upstream request otherwise)."""
        try:
            yield
        except aiohttp.ClientError as exc:
            if self.watchdog.fired:
                raise ProviderTimeout(f"provider {self.watchdog.phase} timeout") from None
            raise ProviderProtocolError(f"provider stream broke: {exc.__class__.__name__}") from None
        finally:
            self.watchdog.cancel()
            self.response.close()

    def check_timeout(self) -> None:
        """Raises: ProviderTimeout when the watchdog ended the stream."""
        if self.watchdog.fired:
            raise ProviderTimeout(f"provider {self.watchdog.phase} timeout")

    async def drain(self) -> None:
        """Read past the last event to the end of the body: only a fully read response returns
        its connection to the pool, and a new connect per turn costs more than the whole turn."""
        try:
            await self.response.read()
        except aiohttp.ClientError:
            return  # the answer is whole; the connection just cannot be reused
        self.response.release()


class Answer(Protocol[E_contra]):
    """A wire's reading of one answer, event by event (`WireClient`)."""

    text: list[str]

    def apply(self, event: E_contra) -> str | None:
        """Take in one event: the text it adds, "" for other content (a tool call's arguments),
        None for no content (the watchdog is not touched).

        Raises:
            ProviderError: the event reports a failure.
        """

    def completion(self) -> Completion:
        """The answer, once the stream has ended.

        Raises:
            ProviderProtocolError: the stream ended before the answer did.
        """


class WireClient(Generic[E]):
    """A `Provider` of one router target over a wire that `Upstream` carries: the subclass
    says where (`path`), how it signs (`headers`), what it sends (`body`) and how it reads the
    events back (`decode`, `answer`); the stream loop is this one."""

    path: ClassVar[str]

    def __init__(self, route: Route, session: aiohttp.ClientSession | None = None) -> None:
        p = route.provider
        self.model = route.model
        self.max_tokens = route.max_tokens
        self.params = route.params  # under the request's own `params` (the router may set them too)
        self._session = session or new_client_session(p)
        self._owns_session = session is None
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream", **self.headers(route)}
        retries = RetryPolicy(max_retries=p.max_retries, budget_s=p.retry_budget_s)
        self._upstream = Upstream(self._session, p.url.rstrip("/") + self.path, headers, timeouts=p, retries=retries)

    @classmethod
    def for_route(cls, route: Route, session: aiohttp.ClientSession | None = None) -> Self:
        """The client of one router target (`agentos.providers.wires.client_for`)."""
        return cls(route, session)

    def headers(self, route: Route) -> dict[str, str]:
        raise NotImplementedError

    def body(self, request: ChatRequest) -> bytes:
        """Raises: ProviderUnsupported for what the wire cannot express."""
        raise NotImplementedError

    def decode(self, data: str) -> E:
        raise NotImplementedError

    def answer(self) -> Answer[E]:
        raise NotImplementedError

    async def aclose(self) -> None:
        if self._owns_session:
            await self._session.close()

    async def stream(self, request: ChatRequest) -> AsyncGenerator[StreamItem, None]:
        stream = await self._upstream.open(self.body(request), retry=request.retry, headers=request.headers)
        watchdog = stream.watchdog
        answer = self.answer()
        with stream.guard():
            async for event in stream.events(self.decode):
                delta = answer.apply(event)
                if delta is not None:
                    watchdog.touch()
                    if delta:
                        answer.text.append(delta)
                        yield TextDelta(delta)
            stream.check_timeout()
            completion = answer.completion()
            await stream.drain()
        yield completion
