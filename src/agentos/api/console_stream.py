"""The console's one event stream per browser tab, and what a tab asks for when it signs in.

Routes::

    GET /v1/console/me        200 {"tenant_id", "key_id", "admin", "scopes"}
    GET /v1/console/metrics   200 the `metrics` event's data, once
    GET /v1/console/stream    SSE, live only (no ids), tagged events:
        hello      {"tenant_id", "key_id", "admin", "scopes"}           first
        metrics    {"t_ms", "tenant": {...}, "server"?: {...}}           every second
        run        {"run_id", "type", "data"}   a run.* or human.* event of one of the tenant's runs
        resync     {}   the tab fell behind and lost events: reload what it shows
        reconnect  {}   last: the stream's time is up (`server.console_stream_s`); open a new one

Browsers give an origin six HTTP/1.1 connections (aiohttp serves no HTTP/2), so a console
that opened a stream per panel would freeze its own requests: one stream carries all.

Cost: one hub per application. While a tab listens, one timer ticks every `interval_s`; each
tick reads the server's metrics once (only when an admin listens: they are every tenant's
numbers together, as on GET /metrics) and each listening tenant's usage once, and hands every
listener its copy. Run events come from the `RunService` watcher (registered only while a tab
listens) and go only to the listeners of the run's tenant with `runs:read`. A listener's queue
is bounded: one that does not read is emptied and told to `resync`, so memory stays bounded.
A run driven by another node (PostgreSQL clusters) reaches only that node's listeners.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from aiohttp import web

from agentos.api.keys import METRICS, RUNS, RUNTIME, SETTINGS, SSE_KEEPALIVE_S
from agentos.api.owners import require_tenant_wide
from agentos.api.routes import Schema, events, json, nullable, obj, tagged
from agentos.api.sessions import json_response
from agentos.api.sse import SSEStream, failures_as_events
from agentos.clock import wall_ms
from agentos.metrics import Metrics
from agentos.tenancy.principal import Principal, Scope, principal
from agentos.waiting import Mailbox

routes = web.RouteTableDef()
operation = tagged("server")

Item = tuple[str, dict[str, Any]]
MAX_QUEUED = 64  # events per listener; a minute of metrics, or a burst of run events
Watch = Callable[[Callable[[str, str, str, dict[str, Any]], None]], Callable[[], None]]


def me(who: Principal) -> dict[str, Any]:
    return {"tenant_id": who.tenant_id, "key_id": who.key_id, "admin": who.is_admin, "scopes": sorted(who.scopes)}


class Listener:
    """One tab's queue of events; iterate it to read them (it ends when the hub closes)."""

    __slots__ = ("who", "_items")

    def __init__(self, who: Principal) -> None:
        self.who = who
        self._items: Mailbox[Item] = Mailbox()

    def offer(self, name: str, data: dict[str, Any]) -> None:
        if len(self._items) >= MAX_QUEUED:  # not read: drop it all, the tab reloads instead
            self._items.clear()
            name, data = "resync", {}
        self._items.put((name, data))

    def close(self) -> None:
        self._items.close()

    def __aiter__(self) -> Listener:
        return self

    async def __anext__(self) -> Item:
        item = await self._items.get()
        if item is None:
            raise StopAsyncIteration
        return item


class ConsoleHub:
    """The listeners of an application, its one timer, and its run watcher."""

    def __init__(
        self, metrics: Metrics, usage: Callable[[str], dict[str, Any]], watch: Watch | None, *, interval_s: float = 1.0
    ) -> None:
        self._metrics = metrics
        self._usage = usage  # a tenant's turns, runs and permits now
        self._watch = watch
        self._unwatch: Callable[[], None] | None = None
        self._listeners: set[Listener] = set()
        self._timer: asyncio.Task[None] | None = None
        self._closed = False
        self.interval_s = interval_s

    def subscribe(self, who: Principal) -> Listener:
        listener = Listener(who)
        if self._closed:  # shutting down: a stream that ends at once, no timer started again
            listener.close()
            return listener
        self._listeners.add(listener)
        if self._timer is None:
            self._timer = asyncio.create_task(self._tick(), name="agentos-console-timer")
            self._unwatch = self._watch(self._on_run) if self._watch is not None else None
        return listener

    def unsubscribe(self, listener: Listener) -> None:
        self._listeners.discard(listener)
        if not self._listeners:
            self._stop()

    async def close(self) -> None:
        """End every stream (they send `reconnect`), stop the timer."""
        self._closed = True
        for listener in self._listeners:
            listener.close()
        self._listeners.clear()
        timer = self._stop()
        if timer is not None:
            await asyncio.wait({timer})

    def _stop(self) -> asyncio.Task[None] | None:
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None
        return timer

    def snapshot(self, who: Principal) -> dict[str, Any]:
        """The `metrics` event's data for `who`: its tenant's usage; the server's for an admin."""
        data = {"t_ms": wall_ms(), "tenant": self._usage(who.tenant_id)}
        return data | {"server": self._metrics.snapshot()} if who.is_admin else data

    def publish_metrics(self) -> None:
        t_ms = wall_ms()
        server = self._metrics.snapshot() if any(lst.who.is_admin for lst in self._listeners) else None
        usage: dict[str, dict[str, Any]] = {}
        for listener in self._listeners:
            tenant = listener.who.tenant_id
            if tenant not in usage:
                usage[tenant] = self._usage(tenant)
            data = {"t_ms": t_ms, "tenant": usage[tenant]}
            listener.offer("metrics", data | {"server": server} if listener.who.is_admin else data)

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            self.publish_metrics()

    def _on_run(self, tenant_id: str, run_id: str, event_type: str, data: dict[str, Any]) -> None:
        item = {"run_id": run_id, "type": event_type, "data": data}
        for listener in self._listeners:
            if listener.who.tenant_id == tenant_id and listener.who.allows(Scope.RUNS_READ):
                listener.offer("run", item)


CONSOLE: web.AppKey[ConsoleHub] = web.AppKey("console")


def console_hub(app: web.Application) -> ConsoleHub:
    """The application's hub, on its metrics, its kernel's per-tenant usage and its runs."""
    kernel = app[RUNTIME].kernel
    runs = app.get(RUNS)
    return ConsoleHub(
        app[METRICS], lambda tenant: asdict(kernel.tenant_usage(tenant)), runs.watch if runs is not None else None
    )


async def close_hub(app: web.Application) -> None:
    await app[CONSOLE].close()


_NUMBERS = {"type": "object", "additionalProperties": {"type": "number"}}
_HISTOGRAM = {
    "type": "object",
    "required": ["le", "counts", "sum", "count"],
    "properties": {
        "le": {"type": "array", "items": {"type": "number"}, "description": "Bucket upper bounds, +Inf left out"},
        "counts": {"type": "array", "items": {"type": "number"}, "description": "Cumulative count per bound"},
        "sum": {"type": "number"},
        "count": {"type": "number", "description": "Every observation: the +Inf bucket"},
    },
}
_ME = Schema.object(
    "ConsoleMe",
    {
        "tenant_id": {"type": "string"},
        "key_id": {**nullable("string"), "description": "null: an open loopback server, no key"},
        "admin": {"type": "boolean"},
        "scopes": {"type": "array", "items": {"type": "string"}},
    },
)
_METRICS = Schema.object(
    "ConsoleMetrics",
    {
        "t_ms": {"type": "integer"},
        "tenant": {
            "description": "The caller's tenant now: permits_held, waiting_for_permit, turns_in_flight, active_runs",
            **_NUMBERS,
        },
        "server": {
            "description": "Admin keys only: every metric of GET /metrics, every tenant's together; gauges and"
            " counters summed over their labels (`values`), histograms cumulative (`histograms`)",
            **obj({"values": _NUMBERS, "histograms": {"type": "object", "additionalProperties": _HISTOGRAM}}),
        },
    },
    ["t_ms", "tenant"],
)


@routes.get("/v1/console/me")
@operation(
    "Who the key is: its tenant, its scopes, whether it is an admin's (the console's sign-in)",
    answers={200: json("The key's principal", _ME)},
)
async def console_me(request: web.Request) -> web.Response:
    return json_response(me(principal(request)))


@routes.get("/v1/console/metrics")
@operation(
    "The console's live numbers once: the tenant's, and the server's for an admin",
    answers={200: json("The numbers now", _METRICS)},
)
async def console_metrics(request: web.Request) -> web.Response:
    who = require_tenant_wide(principal(request), "the console")
    return json_response(request.app[CONSOLE].snapshot(who))


@routes.get("/v1/console/stream")
@operation(
    "The console's one event stream per browser tab (SSE): metrics, run and inbox changes",
    answers={
        200: events(
            "Live only (no ids). `hello` ConsoleMe first; `metrics` ConsoleMetrics every second; `run` {run_id,"
            " type, data}: a run.* or human.* event of one of the tenant's runs (keys with runs:read); `resync` {}:"
            " events were dropped, reload; `reconnect` {} last, after server.console_stream_s: open a new stream."
        )
    },
)
async def console_stream(request: web.Request) -> web.StreamResponse:
    who = require_tenant_wide(principal(request), "the console")
    hub = request.app[CONSOLE]
    loop = asyncio.get_running_loop()
    ends_at = loop.time() + request.app[SETTINGS].server.console_stream_s
    keepalive_s = request.app[SSE_KEEPALIVE_S]
    stream = await SSEStream.open(request)
    listener = hub.subscribe(who)
    async with failures_as_events(stream, "error", {"code": "internal_error"}, "the console stream failed"):
        try:
            await stream.send(None, "hello", me(who))
            listener.offer("metrics", hub.snapshot(who))  # the charts' first point, before the first tick
            while loop.time() < ends_at and (item := await stream.next_or_keepalive(listener, keepalive_s, ends_at)):
                await stream.send(None, *item)
            await stream.send(None, "reconnect", {})
        finally:
            hub.unsubscribe(listener)
    return stream.response
