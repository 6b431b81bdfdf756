"""The aiohttp application: middlewares and routes around the built services."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

from agentos.api import (
    admin,
    agents,
    browser_tokens,
    console,
    console_stream,
    docs,
    knowledge,
    openai_chat,
    openai_responses,
    ops,
    runs,
    schedules,
    sessions,
    triggers,
    turn_events,
    turns,
    usage,
    websocket,
)
from agentos.api.admission import ADMISSION, Admission
from agentos.api.browser import BrowserRules, browser_middleware
from agentos.api.browser_tokens import TOKENS, BrowserGate
from agentos.api.cluster_limits import ClusterLimiters
from agentos.api.console_stream import CONSOLE
from agentos.api.errors import error_middleware
from agentos.api.keys import (
    KNOWLEDGE,
    MAX_BODY_BYTES,
    METRICS,
    QUOTAS,
    RUNS,
    RUNTIME,
    SCHEDULES,
    SETTINGS,
    SSE_KEEPALIVE_S,
    TENANTS,
    TRIGGERS,
    USERS,
)
from agentos.api.middleware import access_log_middleware, auth_middleware, is_loopback
from agentos.api.openai_errors import openai_error_middleware
from agentos.api.ratelimit import LIMITERS, Limiters, add_rate_headers, rate_limit_middleware
from agentos.api.tracing import tracing_middleware
from agentos.providers.router import Router
from agentos.services import Services
from agentos.tenancy.browser_tokens import BrowserTokens
from agentos.tenancy.signing import SigningKeys

SSE_KEEPALIVE_S_DEFAULT = 15.0
# Every route the app serves, each described beside its handler (`agentos.api.routes`); the
# OpenAPI document lists them in this order.
ROUTES = (
    sessions.routes,
    turns.routes,
    turn_events.routes,
    websocket.routes,
    agents.routes,
    runs.routes,
    admin.routes,
    usage.routes,
    knowledge.routes,
    triggers.routes,
    schedules.routes,
    browser_tokens.routes,
    openai_chat.routes,
    openai_responses.routes,
    console_stream.routes,
    ops.routes,
    docs.routes,
    console.routes,
)


def create_app(services: Services, *, sse_keepalive_s: float = SSE_KEEPALIVE_S_DEFAULT) -> web.Application:
    """The HTTP application around built services (`agentos.services.open_services`); closing
    the services is their owner's job, not the app's.

    `sse_keepalive_s`: how often an idle event stream gets a comment line."""
    settings = services.settings
    middlewares: list[Middleware] = []
    if settings.server.access_log and settings.store.enabled:
        middlewares.append(access_log_middleware)
    middlewares.append(openai_error_middleware)  # outside every check: their errors in OpenAI's shape
    middlewares.append(error_middleware)
    middlewares.append(browser_middleware(BrowserRules.from_settings(settings.server)))  # before auth: costs nothing
    loopback = is_loopback(settings.server.host)
    registry = services.tenants
    trusts = services.users.trusts if services.users is not None else None
    tokens = BrowserTokens(SigningKeys(registry.pepper, now_ms=registry.now_ms), registry, trusts)
    gate = BrowserGate(tokens)
    middlewares.append(
        auth_middleware(settings.server.api_token, registry, loopback=loopback, browser=gate, users=services.users)
    )
    if services.tracing.on:  # after auth: the key decides whether a caller's traceparent is taken
        middlewares.append(tracing_middleware(services.tracing, settings.telemetry))
    clock = services.driver.clock  # the kernel's clock: a FakeClock in tests drives both
    limiters = Limiters(clock) if services.link is None else ClusterLimiters(clock, services.link)
    middlewares.append(rate_limit_middleware(limiters))  # after auth: it limits the principal
    # aiohttp's own body cap sits a little above ours so that ours answers with a JSON 413.
    app = web.Application(middlewares=middlewares, client_max_size=settings.server.max_body_bytes + 1)
    app[MAX_BODY_BYTES] = settings.server.max_body_bytes
    app[SETTINGS] = settings
    app[METRICS] = services.metrics
    app[RUNTIME] = services.runtime
    app[RUNS] = services.runs
    app[TENANTS] = services.tenants
    if services.users is not None:
        app[USERS] = services.users
    app[TOKENS] = tokens
    app[SSE_KEEPALIVE_S] = sse_keepalive_s
    app[LIMITERS] = limiters
    app[QUOTAS] = services.quotas
    models = services.provider if isinstance(services.provider, Router) else None  # a test's own: unpriced
    app[ADMISSION] = Admission(services.runtime, services.quotas, limiters, budgets=services.budgets, models=models)
    app[KNOWLEDGE] = services.knowledge
    app[TRIGGERS] = services.triggers
    app[SCHEDULES] = services.schedules
    app[CONSOLE] = console_stream.console_hub(app)
    app.on_shutdown.append(console_stream.close_hub)  # its streams never end by themselves
    app.on_response_prepare.append(add_rate_headers)  # before an event stream's headers leave
    if isinstance(limiters, ClusterLimiters):
        app.on_cleanup.append(_flush(limiters))  # refunds still on their way to Redis
    for table in ROUTES:
        app.router.add_routes(table)
    return app


def _flush(limiters: ClusterLimiters) -> Callable[[web.Application], Awaitable[None]]:
    async def flush(_: web.Application) -> None:
        await limiters.flush()

    return flush
