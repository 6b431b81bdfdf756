"""Health, readiness, metrics and the OpenAPI document."""

from __future__ import annotations

import logging

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from agentos.api.keys import METRICS, RUNS, RUNTIME
from agentos.api.openapi import document_bytes, served_routes
from agentos.api.routes import Answer, Schema, json, operation, text
from agentos.api.sessions import json_response
from agentos.errors import StoreUnavailable
from agentos.runtime.reclaim import heap_figures
from agentos.tenancy.principal import Scope, require

log = logging.getLogger("agentos.api")
routes = web.RouteTableDef()

_HEALTH = Schema.object(
    "Health",
    {
        "status": {"enum": ["ok", "ready", "not_ready"]},
        "store": {
            "description": "/readyz: `ok`, or `unavailable` while the store cannot be reached (503);"
            " PostgreSQL is asked SELECT 1 at most once a second",
            "enum": ["ok", "unavailable"],
        },
        "sandbox": {
            "description": "/readyz: run_command's sandbox (strict; weaker: allowed by sandbox.allow_weaker;"
            " refused: commands are refused) and the parts this OS does not give",
            "type": ["object", "null"],
            "properties": {
                "mode": {"enum": ["strict", "weaker", "refused"]},
                "missing": {"type": "array", "items": {"type": "string"}},
            },
        },
    },
    ["status"],
)


@routes.get("/healthz")
@operation("Liveness", tag="server", open=True, answers={200: json("ok", _HEALTH)})
async def healthz(request: web.Request) -> web.Response:
    return json_response({"status": "ok"})


@routes.get("/readyz")
@operation("Readiness", tag="server", open=True, answers={200: json("ready", _HEALTH), 503: json("not ready", _HEALTH)})
async def readyz(request: web.Request) -> web.Response:
    """Ready, with the sandbox `run_command` gets: `{"mode": "strict" | "weaker" | "refused",
    "missing": [...]}`. A weaker or refusing sandbox keeps the server ready (its chats work; the
    administrator chose it, or commands are refused), but says so here.

    Not ready (503) while draining, and while the store cannot be reached (`"store":
    "unavailable"`; PostgreSQL is asked `SELECT 1`, at most once a second); ready again, with no
    restart, as soon as it answers."""
    runtime = request.app.get(RUNTIME)
    if runtime is None or not runtime.accepting:
        return json_response({"status": "not_ready"}, status=503)
    try:
        await runtime.store.check()
    except StoreUnavailable as exc:
        # The reason (hosts, driver messages) stays in the log: this route needs no credentials.
        # The store logs an outage once each way (`pg_health.Outage`); a probe's answer is not news.
        log.debug("not ready: %s", exc)
        return json_response({"status": "not_ready", "store": "unavailable"}, status=503)
    runs = request.app.get(RUNS)
    sandbox = runs.sandbox.status() if runs is not None else None
    return json_response({"status": "ready", "store": "ok", "sandbox": sandbox.to_dict() if sandbox else None})


@routes.get("/metrics")
@operation("Prometheus metrics", tag="server", answers={200: text("text exposition format", "text/plain")})
async def metrics(request: web.Request) -> web.Response:
    """Server-wide numbers, every tenant's together: the administrator's."""
    require(request, Scope.ADMIN)
    body = request.app[METRICS].render()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


_MEMORY = Schema.object(
    "Memory",
    {
        "rss_bytes": {"type": "integer", "description": "the server process's resident set (0 where /proc has none)"},
        "allocated_blocks": {"type": "integer", "description": "sys.getallocatedblocks()"},
        "malloc": {
            "description": "glibc's mallinfo2(): the C heap (null elsewhere)",
            "type": ["object", "null"],
            "additionalProperties": {"type": "integer"},
        },
        "tracemalloc": {
            "description": "the Python heap (with PYTHONTRACEMALLOC=1); null when it is off",
            "type": ["object", "null"],
            "additionalProperties": {"type": "integer"},
        },
        "trim": {
            "description": "malloc_trim after TTL evictions (memory.trim_after_evictions): setting and result",
            "type": "object",
        },
    },
    ["rss_bytes", "allocated_blocks", "malloc", "tracemalloc", "trim"],
)


@routes.get("/v1/admin/memory")
@operation("The server's memory as its allocators see it", tag="admin", answers={200: json("Memory", _MEMORY)})
async def memory(request: web.Request) -> web.Response:
    """The administrator's diagnostics, computed only when asked (a few microseconds; the
    Python heap only when the server was started with `PYTHONTRACEMALLOC=1`): what the memory
    bench (`agentos bench memory`) samples beside RSS. docs/capacity.md, "Memory"."""
    require(request, Scope.ADMIN)
    reclaimer = request.app[RUNTIME].reclaimer
    return json_response(heap_figures(reclaimer.allocator) | {"trim": reclaimer.figures()})


@routes.get("/openapi.json")
@operation(
    "This document",
    tag="server",
    open=True,
    answers={200: Answer(description="OpenAPI 3.1", content={"application/json": {"type": "object"}})},
)
async def openapi(request: web.Request) -> web.Response:
    """Written from the routes this app serves (`agentos.api.openapi`), once."""
    body = document_bytes(served_routes(request.app.router))
    return web.Response(body=body, content_type="application/json")
