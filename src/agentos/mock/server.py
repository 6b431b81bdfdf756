"""A mock OpenAI-compatible provider: `agentos mock-llm`, and the fake every load test points at.

Usage::

    server = await start_mock(MockSettings(ttft_ms=20, tokens=4, fail_every=5))
    ...  # point a client at server.url ("http://127.0.0.1:PORT/v1")
    assert server.stats.max_concurrent <= 64
    await server.close()

Endpoints: `POST /v1/chat/completions` (streamed SSE or whole JSON), `POST /v1/messages`
(Anthropic's Messages API, streamed: `agentos.mock.anthropic_wire`), `POST /v1/responses`
(OpenAI's Responses API, streamed: `agentos.mock.responses_wire`), `POST /v1/embeddings`,
`GET /v1/models`, `GET /stats`, `POST /stats/reset`, `POST /faults` (switch faults on and off
while running: `{"error_rate": 1.0}`), `GET /metrics`. The three chat wires answer
with the same scripts (`agentos.mock.scenario`), pace and faults; the Anthropic wire's injected
error is its 529 `overloaded_error`. `stream_error_after` ends a stream with the wire's error
event after that many content frames. A prompt prefix marked `cache_control` (Anthropic) or all
but the last message (Responses) is "cached": written the first time, read after.

Faults are decided per chat request (embeddings: mock/embeddings.py), in this order: every
`fail_every`-th request gets 429 with `Retry-After`; then `error_rate` of them get 500; then
`hang_rate` of them are held open without an answer until the client goes away. Random draws
come from `random.Random(seed)`, two per request, so a run with the same seed and the same
request order faults the same requests.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from agentos.errors import ConfigError
from agentos.mock import anthropic_wire, wire
from agentos.mock import responses_wire as responses
from agentos.mock.scenario import AnswerPlan, plan_answer, prompt_tokens
from agentos.mock.settings import Fault, MockSettings, MockStats, decide_fault

# Settings and stats live in mock/settings.py; the server is where callers meet them.
__all__ = ["MOCK_KEY", "MockServer", "MockSettings", "MockStats", "create_mock_app", "decide_fault", "start_mock"]
from agentos.mock.embeddings import EmbeddingsMock
from agentos.mock.wire import Asked, ChunkWriter, Ending, Finish, StreamWriter

# Each wire's answer to a fault: its HTTP status and its error code (OpenAI) or type (Anthropic).
Faults = dict[str, tuple[int, str]]
_OPENAI_FAULTS: Faults = {
    "rate_limit": (429, "rate_limit_exceeded"),
    "error": (500, "server_error"),
    "timeout": (504, "timeout"),
}
_ANTHROPIC_FAULTS: Faults = {
    "rate_limit": (429, "rate_limit_error"),
    "error": (529, "overloaded_error"),  # what an Anthropic outage looks like
    "timeout": (504, "api_error"),
}


@dataclass(frozen=True, slots=True)
class _Wire:
    """How one wire reads a request, writes an answer and says an error."""

    read: Callable[[dict[str, Any]], Asked]
    writer: Callable[[str, int, str], StreamWriter]  # (answer id, created, model)
    faults: Faults
    error_body: Callable[[str, str], dict[str, Any]]
    id_prefix: str
    reports_limits: bool  # a finish of `length` / `stop_sequence` (chat completions: "stop", as ever)
    writes_cache: bool  # reports cache writes (Anthropic), or only reads (OpenAI)

    def error(self, fault: str, message: str, headers: dict[str, str] | None = None) -> web.Response:
        status, code = self.faults[fault]
        return _json(self.error_body(code, message), status=status, headers=headers)


def _message_writer(answer_id: str, _created_s: int, model: str) -> StreamWriter:
    return anthropic_wire.MessageWriter(answer_id, model)


_CHAT = _Wire(wire.read_request, ChunkWriter, _OPENAI_FAULTS, wire.error_body, "chatcmpl-mock-", False, False)
_MESSAGES = _Wire(
    anthropic_wire.read_request, _message_writer, _ANTHROPIC_FAULTS, anthropic_wire.error_body, "msg_mock_", True, True
)
_RESPONSES = _Wire(
    responses.read_request, responses.ResponseWriter, _OPENAI_FAULTS, wire.error_body, "resp_mock_", True, False
)

MOCK_MODEL = "mock-1"
_SWITCHABLE = frozenset({"error_rate", "hang_rate", "fail_every", "retry_after_s", "ttft_ms", "stream_error_after"})
_INT_FAULTS = frozenset({"fail_every", "stream_error_after"})
_MAX_CACHED_PREFIXES = 100_000
_MAX_HANG_S = 600.0  # a hung request is released after this even if the client stays
_HANG_POLL_S = 0.05
_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
_FIRST_TOKEN_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 2.5, 5.0, 10.0)

CompletionHook = Callable[[list[dict[str, Any]]], None]  # the messages of a request answered in full


class _Metrics:
    def __init__(self, stats: MockStats) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.first_token_s = Histogram(
            "mock_llm_first_token_seconds",
            "Time from request arrival to the first streamed chunk.",
            buckets=_FIRST_TOKEN_BUCKETS,
            registry=self.registry,
        )
        self.requests = Counter("mock_llm_requests", "Chat requests by outcome.", ["outcome"], registry=self.registry)
        in_flight = Gauge("mock_llm_in_flight", "Chat requests in flight.", registry=self.registry)
        in_flight.set_function(lambda: stats.in_flight)
        peak = Gauge("mock_llm_max_concurrent", "Peak chat requests in flight.", registry=self.registry)
        peak.set_function(lambda: stats.max_concurrent)


_TRACE_HEADERS = ("traceparent", "tracestate")


class _MockApp:
    """The request handlers and the state they share."""

    def __init__(self, settings: MockSettings, on_completed: CompletionHook | None = None) -> None:
        self.settings = settings
        self._on_completed = on_completed
        self.stats = MockStats()
        self.metrics = _Metrics(self.stats)
        self.embedder = EmbeddingsMock(settings, self.stats)
        self.closing = asyncio.Event()
        self._rng = random.Random(settings.seed)
        self._ids = itertools.count(1)
        self._cache: set[bytes] = set()  # the prompt prefixes "cached" so far (cache tokens)
        # The W3C trace context headers of the last chat request (tests read what a caller passes on)
        self.trace_context: dict[str, str] = {}

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, _CHAT)

    async def messages(self, request: web.Request) -> web.StreamResponse:
        # As the real service: no key (x-api-key, or a bearer token as SDK 2.x sends it) is a 401,
        # no version a 400; any key is taken.
        if not request.headers.get("x-api-key") and not request.headers.get("Authorization"):
            error = anthropic_wire.error_body("authentication_error", "x-api-key header is required")
            return _json(error, status=401)
        if not request.headers.get("anthropic-version"):
            error = anthropic_wire.error_body("invalid_request_error", "anthropic-version header is required")
            return _json(error, status=400)
        return await self._serve(request, _MESSAGES)

    async def responses(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, _RESPONSES)

    async def _serve(self, request: web.Request, dialect: _Wire) -> web.StreamResponse:
        body = await _read_json(request)
        started = asyncio.get_running_loop().time()
        self.trace_context = {k: v for k in _TRACE_HEADERS if (v := request.headers.get(k)) is not None}
        self.stats.requests += 1
        self.stats.enter()
        try:
            return await self._answer(request, body, started, dialect)
        finally:
            self.stats.leave()

    async def _answer(
        self, request: web.Request, body: dict[str, Any], started: float, dialect: _Wire
    ) -> web.StreamResponse:
        fault = decide_fault(self.settings, self.stats.requests, self._rng)
        if fault != "none":
            return await self._fault(request, fault, dialect)
        asked = dialect.read(body)
        tokens = self.settings.tokens if asked.max_tokens is None else min(self.settings.tokens, asked.max_tokens)
        plan = plan_answer(self.settings.scenario, asked.messages, tokens, asked.tools)
        if dialect.reports_limits and asked.stop is not None and not plan.calls:
            plan = AnswerPlan(tokens=1)  # the first token "meets" the stop sequence
        ending = self._ending(asked, plan, dialect)
        answer_id = self._next_id(dialect.id_prefix)
        if asked.stream:
            writer = dialect.writer(answer_id, int(time.time()), asked.model or MOCK_MODEL)
            return await self._stream(request, writer, plan, ending, asked.messages, started)
        try:
            await _sleep_until(started + self._answer_s(plan.tokens))
        except asyncio.CancelledError:
            self._count_abort()
            raise
        self._completed(asked.messages)
        return _json(dialect.writer(answer_id, int(time.time()), _model(body)).whole(plan, ending))

    def _ending(self, asked: Asked, plan: AnswerPlan, dialect: _Wire) -> Ending:
        """The finish and usage: input tokens split into cache reads or writes where the
        request's prefix is (or becomes) cached."""
        prompt = prompt_tokens(asked.messages)
        finish: Finish = "tool_calls" if plan.calls else "stop"
        if dialect.reports_limits and not plan.calls:
            if asked.stop is not None:
                finish = "stop_sequence"
            elif asked.max_tokens is not None and asked.max_tokens < self.settings.tokens:
                finish = "length"
        read = write = 0
        if asked.cache_prefix is not None:
            key, words = asked.cache_prefix
            words = min(words, prompt)
            if key in self._cache:
                read = words
            elif dialect.writes_cache:
                write = words
            if len(self._cache) >= _MAX_CACHED_PREFIXES:
                self._cache.clear()  # a long bench run: forget rather than grow without end
            self._cache.add(key)
        stop = asked.stop if finish == "stop_sequence" else None
        return Ending(
            finish=finish,
            input_tokens=prompt - read - write,
            completion_tokens=plan.tokens,
            cache_read=read,
            cache_write=write,
            stop_sequence=stop,
        )

    async def _fault(self, request: web.Request, fault: Fault, dialect: _Wire) -> web.StreamResponse:
        if fault == "rate_limit":
            self.stats.rate_limited += 1
            self.metrics.requests.labels("rate_limited").inc()
            headers = {"Retry-After": f"{self.settings.retry_after_s:g}"}
            return dialect.error("rate_limit", "mock: rate limited", headers)
        if fault == "error":
            self.stats.errors_injected += 1
            self.metrics.requests.labels("error").inc()
            return dialect.error("error", "mock: injected error")
        self.stats.hung += 1
        self.metrics.requests.labels("hung").inc()
        await self._hang(request)
        return dialect.error("timeout", "mock: hung request released")

    async def _hang(self, request: web.Request) -> None:
        deadline = asyncio.get_running_loop().time() + _MAX_HANG_S
        while not self.closing.is_set() and _client_connected(request):
            if asyncio.get_running_loop().time() >= deadline:
                return
            await asyncio.sleep(_HANG_POLL_S)

    async def _stream(
        self,
        request: web.Request,
        writer: StreamWriter,
        plan: AnswerPlan,
        ending: Ending,
        messages: list[dict[str, Any]],
        started: float,
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers=_SSE_HEADERS)
        frames = writer.frames(plan, ending)
        cut = self.settings.stream_error_after
        try:
            await response.prepare(request)
            if 0 <= cut < len(frames):
                await self._write_answer(response, frames[:cut], started)
                self.stats.errors_injected += 1
                self.metrics.requests.labels("error").inc()
                await response.write(writer.failure(cut))
                return response
            await self._write_answer(response, frames, started)
            await response.write(writer.closing(ending))  # one write: a syscall fewer per stream
        except ConnectionResetError:
            self._count_abort()
            return response
        except asyncio.CancelledError:
            self._count_abort()
            raise
        self._completed(messages)
        return response

    async def _write_answer(self, response: web.StreamResponse, frames: list[bytes], started: float) -> None:
        ttft_s, interval_s = self.settings.ttft_ms / 1000, 1 / self.settings.tps
        for i, frame in enumerate(frames):
            await _sleep_until(started + ttft_s + i * interval_s)
            await response.write(frame)
            if i == 0:
                self.metrics.first_token_s.observe(asyncio.get_running_loop().time() - started)
        await _sleep_until(started + ttft_s + len(frames) * interval_s)

    def _answer_s(self, tokens: int) -> float:
        return self.settings.ttft_ms / 1000 + tokens / self.settings.tps

    def _count_abort(self) -> None:
        self.stats.aborted += 1
        self.metrics.requests.labels("aborted").inc()

    def _completed(self, messages: list[dict[str, Any]]) -> None:
        self._count_outcome("completed")
        if self._on_completed is not None:
            self._on_completed(messages)

    def _count_outcome(self, outcome: str) -> None:
        self.stats.completed += 1
        self.metrics.requests.labels(outcome).inc()

    def _next_id(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids)}"

    async def embeddings(self, request: web.Request) -> web.Response:
        status, answer, headers = self.embedder.respond(await _read_json(request), MOCK_MODEL)
        return _json(answer, status, headers)

    async def models(self, _request: web.Request) -> web.Response:
        return _json({"object": "list", "data": [{"id": MOCK_MODEL, "object": "model", "owned_by": "agentos"}]})

    async def get_stats(self, _request: web.Request) -> web.Response:
        return _json(self.stats.as_dict())

    async def reset_stats(self, _request: web.Request) -> web.Response:
        self.stats.reset()
        self._cache.clear()
        self._rng = random.Random(self.settings.seed)
        self.embedder.reset()
        return _json(self.stats.as_dict())

    def set_faults(self, **changes: float) -> MockSettings:
        """Change the fault settings (`error_rate`, `hang_rate`, `fail_every`, `retry_after_s`,
        `ttft_ms`, `stream_error_after`) of a running mock: what a fault campaign switches on and off
        mid-run.

        Raises: ConfigError (MockSettings' own check) for an unknown or invalid value."""
        unknown = set(changes) - _SWITCHABLE
        if unknown:
            raise ConfigError(f"mock-llm: faults cannot change {sorted(unknown)}")
        self.settings = dataclasses.replace(self.settings, **changes)  # type: ignore[arg-type]  # names checked above
        return self.settings

    async def post_faults(self, request: web.Request) -> web.Response:
        body = await _read_json(request)
        try:
            settings = self.set_faults(**{k: int(v) if k in _INT_FAULTS else float(v) for k, v in body.items()})
        except (ConfigError, TypeError, ValueError) as exc:
            return _json(wire.error_body("invalid_faults", str(exc)), status=400)
        return _json({name: getattr(settings, name) for name in sorted(_SWITCHABLE)})

    async def get_metrics(self, _request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def on_shutdown(self, _app: web.Application) -> None:
        self.closing.set()


MOCK_KEY = web.AppKey("agentos_mock", _MockApp)


def create_mock_app(settings: MockSettings, *, on_completed: CompletionHook | None = None) -> web.Application:
    """The mock provider as an aiohttp application (not started).

    Args:
        settings: timing, faults and scenario.
        on_completed: called, in the request's task, with the request's messages each time an
            answer has been sent in full (what the `completed` counter counts).
    """
    mock = _MockApp(settings, on_completed)
    app = web.Application(client_max_size=16 << 20)
    app[MOCK_KEY] = mock
    app.router.add_post("/v1/chat/completions", mock.chat)
    app.router.add_post("/v1/messages", mock.messages)
    app.router.add_post("/v1/responses", mock.responses)
    app.router.add_post("/v1/embeddings", mock.embeddings)
    app.router.add_get("/v1/models", mock.models)
    app.router.add_get("/stats", mock.get_stats)
    app.router.add_post("/stats/reset", mock.reset_stats)
    app.router.add_post("/faults", mock.post_faults)
    app.router.add_get("/metrics", mock.get_metrics)
    app.on_shutdown.append(mock.on_shutdown)
    return app


@dataclass(kw_only=True)
class MockServer:
    """A running mock on a loopback port."""

    url: str  # base URL ending in /v1
    stats: MockStats
    runner: web.AppRunner

    @property
    def trace_context(self) -> dict[str, str]:
        """The `traceparent` and `tracestate` headers of the last chat request (those it had)."""
        mock: _MockApp = self.runner.app[MOCK_KEY]
        return mock.trace_context

    def set_faults(self, **changes: float) -> MockSettings:
        """`POST /faults`, in process: see `_MockApp.set_faults`."""
        mock: _MockApp = self.runner.app[MOCK_KEY]
        return mock.set_faults(**changes)

    async def close(self) -> None:
        await self.runner.cleanup()


async def start_mock(
    settings: MockSettings, host: str = "127.0.0.1", port: int = 0, *, on_completed: CompletionHook | None = None
) -> MockServer:
    """Start the mock on `host:port` (0: a free port) and return once it accepts connections."""
    app = create_mock_app(settings, on_completed=on_completed)
    # handler_cancellation: a client that goes away cancels its handler at once, so an abandoned
    # stream is counted as aborted even while it waits for its first token.
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=4096)
    await site.start()
    bound_host, bound_port = runner.addresses[0][:2]
    return MockServer(url=f"http://{_url_host(bound_host)}:{bound_port}/v1", stats=app[MOCK_KEY].stats, runner=runner)


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


async def _read_json(request: web.Request) -> dict[str, Any]:
    try:
        body = msgspec.json.decode(await request.read())
    except msgspec.DecodeError:
        raise web.HTTPBadRequest(
            text='{"error": {"message": "body is not JSON"}}', content_type="application/json"
        ) from None
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(
            text='{"error": {"message": "body must be an object"}}', content_type="application/json"
        )
    return body


def _model(body: dict[str, Any]) -> str:
    model = body.get("model")
    return model if isinstance(model, str) and model else MOCK_MODEL


def _json(obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(body=msgspec.json.encode(obj), status=status, headers=headers, content_type="application/json")


def _client_connected(request: web.Request) -> bool:
    transport = request.transport
    return transport is not None and not transport.is_closing()


async def _sleep_until(deadline: float) -> None:
    delay = deadline - asyncio.get_running_loop().time()
    if delay > 0:
        await asyncio.sleep(delay)
