"""A mock OpenAI-compatible provider: `agentos mock-llm`, and the fake every load test points at.

Usage::

    server = await start_mock(MockSettings(ttft_ms=20, tokens=4, fail_every=5))
    ...  # point a client at server.url ("http://127.0.0.1:PORT/v1")
    assert server.stats.max_concurrent <= 64
    await server.close()

Endpoints: `POST /v1/chat/completions` (streamed SSE or whole JSON), `POST /v1/embeddings`,
`GET /v1/models`, `GET /stats`, `POST /stats/reset`, `POST /faults` (switch faults on and off
while running: `{"error_rate": 1.0}`), `GET /metrics`.

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
from agentos.mock.scenario import AnswerPlan, offered_tools, plan_answer, prompt_tokens
from agentos.mock.settings import Fault, MockSettings, MockStats, decide_fault

# Settings and stats live in mock/settings.py; the server is where callers meet them.
__all__ = ["MOCK_KEY", "MockServer", "MockSettings", "MockStats", "create_mock_app", "decide_fault", "start_mock"]
from agentos.mock.embeddings import EmbeddingsMock
from agentos.mock.wire import DONE, ChunkWriter, completion_body, usage

MOCK_MODEL = "mock-1"
_SWITCHABLE = frozenset({"error_rate", "hang_rate", "fail_every", "retry_after_s", "ttft_ms"})
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

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await _read_json(request)
        started = asyncio.get_running_loop().time()
        self.stats.requests += 1
        self.stats.enter()
        try:
            return await self._answer(request, body, started)
        finally:
            self.stats.leave()

    async def _answer(self, request: web.Request, body: dict[str, Any], started: float) -> web.StreamResponse:
        fault = decide_fault(self.settings, self.stats.requests, self._rng)
        if fault != "none":
            return await self._fault(request, fault)
        messages = body.get("messages") or []
        tokens = _token_count(self.settings.tokens, body)
        plan = plan_answer(self.settings.scenario, messages, tokens, offered_tools(body))
        prompt = prompt_tokens(messages)
        if body.get("stream"):
            return await self._stream(request, plan, (messages, prompt), started)
        try:
            await _sleep_until(started + self._answer_s(plan.tokens))
        except asyncio.CancelledError:
            self._count_abort()
            raise
        self._completed(messages)
        created, completion_id = int(time.time()), self._next_id()
        return _json(completion_body(completion_id, created, _model(body), plan, prompt))

    async def _fault(self, request: web.Request, fault: Fault) -> web.StreamResponse:
        if fault == "rate_limit":
            self.stats.rate_limited += 1
            self.metrics.requests.labels("rate_limited").inc()
            headers = {"Retry-After": f"{self.settings.retry_after_s:g}"}
            return _json(_error("rate_limit_exceeded", "mock: rate limited"), status=429, headers=headers)
        if fault == "error":
            self.stats.errors_injected += 1
            self.metrics.requests.labels("error").inc()
            return _json(_error("server_error", "mock: injected error"), status=500)
        self.stats.hung += 1
        self.metrics.requests.labels("hung").inc()
        await self._hang(request)
        return _json(_error("timeout", "mock: hung request released"), status=504)

    async def _hang(self, request: web.Request) -> None:
        deadline = asyncio.get_running_loop().time() + _MAX_HANG_S
        while not self.closing.is_set() and _client_connected(request):
            if asyncio.get_running_loop().time() >= deadline:
                return
            await asyncio.sleep(_HANG_POLL_S)

    async def _stream(
        self, request: web.Request, plan: AnswerPlan, prompt: tuple[list[dict[str, Any]], int], started: float
    ) -> web.StreamResponse:
        messages, prompt_count = prompt
        response = web.StreamResponse(headers=_SSE_HEADERS)
        writer = ChunkWriter(self._next_id(), int(time.time()), MOCK_MODEL)
        try:
            await response.prepare(request)
            await self._write_answer(response, writer, plan, started)
            final = writer.final("tool_calls" if plan.tool_call else "stop", usage(prompt_count, plan.tokens))
            await response.write(final + DONE)  # one write: a syscall fewer per stream
        except ConnectionResetError:
            self._count_abort()
            return response
        except asyncio.CancelledError:
            self._count_abort()
            raise
        self._completed(messages)
        return response

    async def _write_answer(
        self, response: web.StreamResponse, writer: ChunkWriter, plan: AnswerPlan, started: float
    ) -> None:
        frames = writer.tool_call_frames(plan) if plan.tool_call else writer.text_frames(plan)
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

    def _next_id(self) -> str:
        return f"chatcmpl-mock-{next(self._ids)}"

    async def embeddings(self, request: web.Request) -> web.Response:
        status, answer, headers = self.embedder.respond(await _read_json(request), MOCK_MODEL)
        return _json(answer, status, headers)

    async def models(self, _request: web.Request) -> web.Response:
        return _json({"object": "list", "data": [{"id": MOCK_MODEL, "object": "model", "owned_by": "agentos"}]})

    async def get_stats(self, _request: web.Request) -> web.Response:
        return _json(self.stats.as_dict())

    async def reset_stats(self, _request: web.Request) -> web.Response:
        self.stats.reset()
        self._rng = random.Random(self.settings.seed)
        self.embedder.reset()
        return _json(self.stats.as_dict())

    def set_faults(self, **changes: float) -> MockSettings:
        """Change the fault settings (`error_rate`, `hang_rate`, `fail_every`, `retry_after_s`,
        `ttft_ms`) of a running mock: what a fault campaign switches on and off mid-run.

        Raises: ConfigError (MockSettings' own check) for an unknown or invalid value."""
        unknown = set(changes) - _SWITCHABLE
        if unknown:
            raise ConfigError(f"mock-llm: faults cannot change {sorted(unknown)}")
        self.settings = dataclasses.replace(self.settings, **changes)  # type: ignore[arg-type]
        return self.settings

    async def post_faults(self, request: web.Request) -> web.Response:
        body = await _read_json(request)
        try:
            settings = self.set_faults(**{k: float(v) if k != "fail_every" else int(v) for k, v in body.items()})
        except (ConfigError, TypeError, ValueError) as exc:
            return _json(_error("invalid_faults", str(exc)), status=400)
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


def _token_count(tokens: int, body: dict[str, Any]) -> int:
    limit = body.get("max_tokens") or body.get("max_completion_tokens")
    return min(tokens, int(limit)) if isinstance(limit, int) and limit > 0 else tokens


def _model(body: dict[str, Any]) -> str:
    model = body.get("model")
    return model if isinstance(model, str) and model else MOCK_MODEL


def _error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": code, "code": code}}


def _json(obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(body=msgspec.json.encode(obj), status=status, headers=headers, content_type="application/json")


def _client_connected(request: web.Request) -> bool:
    transport = request.transport
    return transport is not None and not transport.is_closing()


async def _sleep_until(deadline: float) -> None:
    delay = deadline - asyncio.get_running_loop().time()
    if delay > 0:
        await asyncio.sleep(delay)
