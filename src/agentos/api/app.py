"""The aiohttp application: middlewares, routes, and the components' lifespan."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
from aiohttp import web
from aiohttp.typedefs import Middleware

from agentos.agents import RunService
from agentos.api import agents, ops, runs, sessions, turns, websocket
from agentos.api.errors import error_middleware
from agentos.api.keys import MAX_BODY_BYTES, METRICS, RUNS, RUNTIME, SETTINGS, SSE_KEEPALIVE_S
from agentos.api.middleware import access_log_middleware, auth_middleware
from agentos.config import Settings
from agentos.metrics import Metrics
from agentos.providers.openai_compat import OpenAICompatProvider
from agentos.runtime.runtime import Runtime
from agentos.store.base import Store
from agentos.store.memory import MemoryStore
from agentos.store.sqlite import SQLiteStore

log = logging.getLogger("agentos")

DRAIN_TIMEOUT_S = 30.0
SSE_KEEPALIVE_S_DEFAULT = 15.0


def create_app(settings: Settings) -> web.Application:
    middlewares: list[Middleware] = []
    if settings.server.access_log and settings.store.enabled:
        middlewares.append(access_log_middleware)
    middlewares.append(error_middleware)
    if settings.server.api_token:
        middlewares.append(auth_middleware(settings.server.api_token))
    # aiohttp's own body cap sits a little above ours so that ours answers with a JSON 413.
    app = web.Application(middlewares=middlewares, client_max_size=settings.server.max_body_bytes + 1)
    app[MAX_BODY_BYTES] = settings.server.max_body_bytes
    app[SETTINGS] = settings
    app[METRICS] = Metrics()
    app[SSE_KEEPALIVE_S] = SSE_KEEPALIVE_S_DEFAULT
    for table in (sessions.routes, turns.routes, websocket.routes, agents.routes, runs.routes, ops.routes):
        app.router.add_routes(table)
    app.cleanup_ctx.append(_lifespan)
    return app


def _make_store(settings: Settings, metrics: Metrics) -> Store:
    if not settings.store.enabled:
        return MemoryStore()
    return SQLiteStore(
        Path(settings.data_dir),
        settings.store,
        jsonl_dir=settings.jsonl_dir,
        on_batch=metrics.observe_event_batch,
    )


async def _lifespan(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    mock = None
    provider_config = settings.provider
    if not provider_config.url:
        from agentos.bench.mock_llm import MockSettings, start_mock

        m = settings.mock
        mock = await start_mock(MockSettings(ttft_ms=m.ttft_ms, tps=m.tps, tokens=m.tokens))
        provider_config = msgspec.structs.replace(provider_config, url=mock.url)
        log.warning("no provider configured (--provider-url): using the built-in mock provider at %s", mock.url)
    store = _make_store(settings, app[METRICS])
    await store.start()
    provider = OpenAICompatProvider(provider_config)
    runtime = app[RUNTIME] = Runtime(settings, store, provider, app[METRICS])
    # Runs call the model through the kernel's permits: runs and turns share concurrency_limit.
    runs = RunService(
        runtime.permitted(provider), Path(settings.data_dir) if settings.store.enabled else None, settings
    )
    await runs.start()  # resumes every unfinished run from its journal
    app[RUNS] = runtime.runs = runs
    runtime.start_lag_probe()
    try:
        yield
    finally:
        await app[RUNTIME].drain(DRAIN_TIMEOUT_S)
        await runs.close()  # before the provider: draining runs may still call the model
        await provider.aclose()
        await store.close()
        if mock is not None:
            await mock.close()
