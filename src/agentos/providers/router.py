"""The router: a `Provider` that serves each model from its ordered targets.

For each call it walks the model's targets in order and asks the first one whose breaker lets it
(`agentos.providers.breaker`). The guarantee it keeps:

- a target that fails **before its first token** (connect error, timeout, 429, 5xx, overloaded,
  a broken stream) passes the call to the next target: the client saw nothing yet;
- **after the first token** a failure ends the call as before (the turn fails with the reason):
  never a silent restart that would repeat text.

The last target of a model is never skipped by its breaker: breakers decide where a call goes
first, they never make a model fail faster than its providers do (a model with one target
behaves exactly as a single provider did before the router).

Around each attempt: the target's provider's own concurrency limit (`max_concurrency`), the
budgets (`Meter.reserve` the worst case before, `settle` to the real cost after) and, for a call
that answered, one row in the usage ledger. Counters per target (`statistics()`) are read by
the Prometheus collector in `agentos.metrics` at scrape time: nothing here touches Prometheus.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
from collections.abc import AsyncGenerator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, aclosing, nullcontext
from dataclasses import dataclass, field, replace
from typing import Any

import aiohttp
import msgspec

from agentos.clock import Clock, wall_ms
from agentos.config import Route, Settings
from agentos.config.provider import routes
from agentos.errors import (
    ProviderError,
    ProviderHTTPError,
    ProviderProtocolError,
    ProviderTimeout,
    ProviderUnavailable,
)
from agentos.providers.base import ChatRequest, Completion, Provider, StreamItem, TextDelta
from agentos.providers.breaker import Breakers, BreakerShare
from agentos.providers.metering import Estimate, Ledger, Meter, Spend, cost_of, worst_case
from agentos.providers.wires import client_for, session_for
from agentos.telemetry import NO_TRACING, NULL_SPAN, Span, Tracing, trace_context

log = logging.getLogger("agentos.providers")

TTFT_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class ModelNotFound(ProviderError, code="model_not_found"):
    """The call names a model the config does not define."""


@dataclass(slots=True)
class TargetStatistics:
    """One target's counters since start (read by the metrics collector)."""

    requests: int = 0
    failures: dict[str, int] = field(default_factory=dict)  # by reason (the error's code)
    fallbacks: int = 0  # calls it passed on to the next target
    ttft_buckets: list[int] = field(default_factory=lambda: [0] * (len(TTFT_BUCKETS_S) + 1))
    ttft_sum_s: float = 0.0
    ttft_count: int = 0

    def observe_ttft(self, seconds: float) -> None:
        self.ttft_buckets[bisect.bisect_left(TTFT_BUCKETS_S, seconds)] += 1
        self.ttft_sum_s += seconds
        self.ttft_count += 1


def _breaks_target(error: ProviderError) -> bool:
    """Does `error` say the target is unwell (counted by its breaker), rather than the request
    being one it cannot serve (a 400, an unsupported feature)?"""
    if isinstance(error, ProviderHTTPError):
        return error.retryable or error.status_code in (401, 403, 408)
    return isinstance(error, ProviderTimeout | ProviderUnavailable | ProviderProtocolError) or error.retryable


class Router:
    """Usage::

    router = Router(models, default_model, breakers, clock)
    async with aclosing(router.stream(ChatRequest(messages, model="smart"))) as stream:
        async for item in stream: ...
    await router.aclose()
    """

    def __init__(
        self,
        models: Mapping[str, list[Route]],
        default_model: str,
        breakers: Breakers,
        clock: Clock,
        *,
        passthrough: bool = False,
        meter: Meter | None = None,
        ledger: Ledger | None = None,
        now_ms: Callable[[], int] = wall_ms,
        clients: Mapping[str, Provider] | None = None,
        tracing: Tracing = NO_TRACING,
    ) -> None:
        """`passthrough`: a model the config does not name goes to the default model's first
        target under its own name (the simple `[provider]` form, where agents name any model of
        the one provider). `clients`: a client per target name, replacing the wire clients
        (tests give their own)."""
        self._tracing = tracing
        self._models = {name: list(targets) for name, targets in models.items()}
        self._default = default_model
        self._passthrough = passthrough
        self.breakers = breakers
        self._clock = clock
        self._meter = meter
        self._ledger = ledger
        self._now_ms = now_ms
        self._sessions: dict[str, aiohttp.ClientSession] = {}
        self._clients: dict[str, Provider] = dict(clients or {})
        self._limits: dict[str, asyncio.Semaphore] = {}
        self._stats: dict[str, TargetStatistics] = {}
        for targets in self._models.values():
            for route in targets:
                self._stats.setdefault(route.name, TargetStatistics())

    @property
    def default_model(self) -> str:
        return self._default

    def models(self) -> dict[str, list[Route]]:
        return {name: list(targets) for name, targets in self._models.items()}

    def statistics(self) -> dict[str, TargetStatistics]:
        return self._stats

    def set_meter(self, meter: Meter | None, ledger: Ledger | None) -> None:
        """The budgets and the ledger, once the store and the tenants exist (`open_services`
        builds the router before them)."""
        self._meter, self._ledger = meter, ledger

    async def aclose(self) -> None:
        for session in self._sessions.values():
            await session.close()
        self._sessions.clear()

    # --- the call ---

    def _chat_span(self, model: str, request: ChatRequest) -> tuple[Span, int, ChatRequest]:
        """The call's span, how much content it may capture, and the request carrying its
        traceparent. Not made current: `stream` yields to its consumer, and a context set there
        would leak into the consumer's between items."""
        at = request.trace
        attributes = _call_attributes(model, request)
        if at is None:
            span = self._tracing.start(f"chat {model}", attributes, kind="client")
        else:
            name = f"chat {model}"
            span = self._tracing.start(
                name, attributes, kind="client", parent=at.parent, span_id=at.span_id, links=at.links
            )
        request = replace(request, headers={**(request.headers or {}), **trace_context(span)})
        capture = self._tracing.capture(request.context.tenant_id) if request.context is not None else 0
        if capture:  # the administrator turned content on for this tenant ([telemetry] capture_content)
            span.set_attribute("gen_ai.input.messages", _bounded(request.messages, capture))
        return span, capture, request

    async def stream(self, request: ChatRequest) -> AsyncGenerator[StreamItem, None]:
        model, targets = self._resolve(request.model)
        span, capture, request = self._chat_span(model, request) if self._tracing.on else (NULL_SPAN, 0, request)
        last = len(targets) - 1
        try:
            for i, route in enumerate(targets):
                # The last target is never skipped: breakers decide where a call goes first, they
                # never make a model fail faster than its providers do.
                if i < last and not self.breakers.try_acquire(route.name):
                    if span is not NULL_SPAN:
                        span.add_event("agentos.target.skipped", {"agentos.target": route.name})
                    continue
                # One target's try, inline rather than a generator of its own: every token
                # passes through here, and a generator layer per token is measurable at c=1000.
                attempt = _Attempt(self, request, model, route, has_next=i < last, span=span, capture=capture)
                try:
                    await attempt.reserve()  # BudgetExceeded: no fallback helps
                    async with self._limit(route), aclosing(self._client(route).stream(attempt.sub)) as upstream:
                        async for item in upstream:
                            if not attempt.answered:
                                attempt.first_token()
                            if isinstance(item, TextDelta):
                                yield item
                                continue
                            yield await attempt.complete(item)
                            return
                    raise ProviderProtocolError("the provider stream ended without a completion")
                except ProviderError as error:
                    if not attempt.falls_back(error):
                        raise
                    self._fell_back(model, route, error, span)
                except BaseException:
                    self.breakers.release(route.name)  # cancelled: says nothing of the target
                    raise
                finally:
                    await attempt.finish()
        except Exception as exc:
            span.record_error(exc)
            raise
        finally:
            span.end()

    def _fell_back(self, model: str, route: Route, error: ProviderError, span: Span) -> None:
        self._stats[route.name].fallbacks += 1
        if span is not NULL_SPAN:
            span.add_event("agentos.fallback", {"agentos.target": route.name, "error.type": error.code})
        log.info("model %s: %s failed before its first token (%s); falling back", model, route.name, error.code)

    def _count_failure(self, route: Route, error: ProviderError) -> None:
        if isinstance(error, ProviderHTTPError) and error.status_code == 429 and error.retry_after_s:
            self.breakers.hold(route.name, error.retry_after_s)
        if _breaks_target(error):
            self.breakers.failure(route.name)
        else:
            self.breakers.release(route.name)

    async def _settle(self, reservation: Any, request: ChatRequest, model: str, completion: Completion) -> None:
        if request.context is None:
            return
        spend = Spend(request.context, model, completion.target, completion.usage, completion.cost, self._now_ms())
        if reservation is not None:
            assert self._meter is not None
            await self._meter.settle(reservation, spend)
        if self._ledger is not None:
            self._ledger.record(spend)

    # --- targets ---

    def _resolve(self, name: str | None) -> tuple[str, list[Route]]:
        model = name or self._default
        targets = self._models.get(model)
        if targets is not None:
            return model, targets
        if self._passthrough and self._default in self._models:
            first = self._models[self._default][0]
            route = replace(first, name=f"{first.provider_name}/{model}", model=model)
            self._models[model] = [route]
            self._stats.setdefault(route.name, TargetStatistics())
            return model, [route]
        raise ModelNotFound(f"no model named {model!r} (see [models] in the config)")

    def _client(self, route: Route) -> Provider:
        client = self._clients.get(route.name)
        if client is None:
            session = self._sessions.get(route.provider_name)
            if session is None:
                session = self._sessions[route.provider_name] = session_for(route)
            client = self._clients[route.name] = client_for(route, session)
        return client

    def _limit(self, route: Route) -> AbstractAsyncContextManager[Any]:
        cap = route.provider.max_concurrency
        if not cap:
            return nullcontext()
        limit = self._limits.get(route.provider_name)
        if limit is None:
            limit = self._limits[route.provider_name] = asyncio.Semaphore(cap)
        return limit


class _Attempt:
    """The bookkeeping of one target's try: its request, budget reservation, first token,
    priced completion and failure accounting (the tokens themselves pass in `Router.stream`)."""

    __slots__ = (
        "router",
        "request",
        "model",
        "route",
        "has_next",
        "span",
        "capture",
        "stats",
        "sub",
        "reservation",
        "started",
        "answered",
        "settled",
    )

    def __init__(
        self,
        router: Router,
        request: ChatRequest,
        model: str,
        route: Route,
        *,
        has_next: bool,
        span: Span,
        capture: int,
    ) -> None:
        self.router, self.request, self.model, self.route = router, request, model, route
        self.has_next, self.span, self.capture = has_next, span, capture
        self.stats = router._stats.setdefault(route.name, TargetStatistics())
        self.stats.requests += 1
        self.sub = replace(
            request,
            model=route.model,
            params=route.params or None,
            max_tokens=request.max_tokens or route.max_tokens or None,
            retry=not has_next,
        )
        self.reservation: Any = None
        self.started = router._clock.now()
        self.answered = False
        self.settled = False

    async def reserve(self) -> None:
        meter, context = self.router._meter, self.request.context
        if meter is not None and context is not None and not meter.idle(context):
            max_tokens = self.sub.max_tokens or 0
            worst = worst_case(self.route.price, _prompt_bytes(self.request), max_tokens)
            self.reservation = await meter.reserve(Estimate(context, self.model, self.route.name, worst, max_tokens))

    def first_token(self) -> None:
        self.answered = True
        ttft_s = self.router._clock.now() - self.started
        self.stats.observe_ttft(ttft_s)
        if self.span is not NULL_SPAN:
            self.span.add_event(
                "gen_ai.first_token", {"agentos.target": self.route.name, "agentos.ttft_ms": ttft_s * 1000}
            )

    async def complete(self, item: Completion) -> Completion:
        route, span = self.route, self.span
        completion = replace(item, target=route.name, cost=cost_of(route.price, item.usage))
        if span is not NULL_SPAN:
            _trace_completion(span, route, completion)
            if self.capture:
                output = [{"role": "assistant", "content": completion.text}]
                span.set_attribute("gen_ai.output.messages", _bounded(output, self.capture))
        self.router.breakers.success(route.name, self.started)
        self.settled = True
        await self.router._settle(self.reservation, self.request, self.model, completion)
        return completion

    def falls_back(self, error: ProviderError) -> bool:
        """Count `error`; True when the call passes to the next target (nothing was answered
        yet and one follows)."""
        self.stats.failures[error.code] = self.stats.failures.get(error.code, 0) + 1
        self.router._count_failure(self.route, error)
        return not self.answered and self.has_next

    async def finish(self) -> None:
        if self.reservation is not None and not self.settled:
            meter = self.router._meter
            assert meter is not None
            await meter.settle(self.reservation, None)


def _prompt_bytes(request: ChatRequest) -> int:
    """The request's text, in bytes: every message's content and every tool definition (an
    upper bound of its tokens for the worst-case reservation)."""
    total = 0
    for message in request.messages:
        content = message.get("content")
        if isinstance(content, str):
            total += len(content.encode())
        elif content is not None:
            total += len(repr(content).encode())
        for call in message.get("tool_calls") or ():
            total += len(repr(call).encode())
    for tool in request.tools or ():
        total += len(repr(tool).encode())
    return total


def open_router(
    settings: Settings,
    clock: Clock,
    *,
    share: BreakerShare | None = None,
    tracing: Tracing = NO_TRACING,
    ledger: Ledger | None = None,
    meter: Meter | None = None,
) -> Router:
    """The router of `settings`: `[providers]` and `[models]`, or the simple `[provider]` form
    (then a model the config does not name passes through to that provider, as before);
    `ledger`: where each call that answered is recorded (`agentos.tenancy.ledger.StoreLedger`);
    `meter`: the budgets each call reserves on, then settles (`agentos.tenancy.budgets`).

    Raises: ConfigError naming the key (an unknown provider, a key variable not set)."""
    models, default = routes(settings.provider, settings.providers, settings.models, settings.routing)
    r = settings.routing
    breakers = Breakers(
        clock, failures=r.breaker_failures, cooldown_s=r.breaker_cooldown_s, probes=r.breaker_probes, share=share
    )
    passthrough = not settings.models
    return Router(
        models, default, breakers, clock, passthrough=passthrough, tracing=tracing, ledger=ledger, meter=meter
    )


_GEN_AI_PROVIDER = {"openai": "openai", "openai-responses": "openai", "anthropic": "anthropic"}


def _call_attributes(model: str, request: ChatRequest) -> dict[str, Any]:
    attributes: dict[str, Any] = {"gen_ai.operation.name": "chat", "gen_ai.request.model": model}
    if request.max_tokens:
        attributes["gen_ai.request.max_tokens"] = request.max_tokens
    # Who the call is for is on the spans above it (the request, the turn, the run's root).
    return attributes


def _trace_completion(span: Span, route: Route, completion: Completion) -> None:
    usage = completion.usage
    span.set_attributes(
        {
            "gen_ai.provider.name": _GEN_AI_PROVIDER.get(route.provider.kind, route.provider.kind),
            "gen_ai.response.model": route.model,
            "gen_ai.response.finish_reasons": [completion.finish_reason],
            "gen_ai.usage.input_tokens": usage.prompt_tokens,
            "gen_ai.usage.output_tokens": usage.completion_tokens,
            "agentos.target": route.name,
        }
    )
    if usage.cache_read_tokens:
        span.set_attribute("gen_ai.usage.cache_read.input_tokens", usage.cache_read_tokens)
    if usage.cache_write_tokens:
        span.set_attribute("gen_ai.usage.cache_creation.input_tokens", usage.cache_write_tokens)
    if completion.cost is not None:
        span.set_attribute("agentos.cost", completion.cost)


def _bounded(messages: Any, max_chars: int) -> str:
    """Content as one JSON attribute, cut at `max_chars` (and said so)."""
    text = msgspec.json.encode(messages).decode()
    return text if len(text) <= max_chars else text[:max_chars] + "...[truncated]"
