"""A small OTLP/HTTP receiver on loopback: what the exporter really sends, decoded from its
protobuf. The trace store tests (Phoenix) prove what a backend keeps; this proves the wire.
`MemoryExporter` keeps the same decoded spans from requests handed to it in process."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass
class Received:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    attributes: dict[str, Any]
    events: list[str]
    links: list[tuple[str, str]]  # (trace id, span id)
    resource: dict[str, Any]
    status_code: int  # 0 unset, 2 error
    trace_state: str = ""  # the W3C tracestate the span carries


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


def received(message: ExportTraceServiceRequest) -> list[Received]:
    """The spans of one OTLP request, each with its resource's attributes."""
    spans = []
    for resource_spans in message.resource_spans:
        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
        for scope in resource_spans.scope_spans:
            for s in scope.spans:
                spans.append(
                    Received(
                        name=s.name,
                        trace_id=s.trace_id.hex(),
                        span_id=s.span_id.hex(),
                        parent_span_id=s.parent_span_id.hex(),
                        kind=s.kind,
                        attributes={a.key: _value(a.value) for a in s.attributes},
                        events=[e.name for e in s.events],
                        links=[(link.trace_id.hex(), link.span_id.hex()) for link in s.links],
                        resource=resource,
                        status_code=s.status.code,
                        trace_state=s.trace_state,
                    )
                )
    return spans


class MemoryExporter:
    """An exporter for `open_tracing(exporter=...)` that keeps what it is sent, decoded."""

    def __init__(self) -> None:
        self.spans: list[Received] = []
        self._lock = threading.Lock()  # the shipping thread appends, the test reads

    def export_request(self, request: ExportTraceServiceRequest, spans: int) -> bool:
        with self._lock:
            self.spans.extend(received(request))
        return True

    def shutdown(self) -> None:
        return None

    def finished(self) -> list[Received]:
        with self._lock:
            return list(self.spans)


@dataclass
class OtlpSink:
    url: str = ""
    spans: list[Received] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: web.Request) -> web.Response:
        message = ExportTraceServiceRequest()
        message.ParseFromString(await request.read())
        self.spans.extend(received(message))
        self.arrived.set()
        body = ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=body, content_type="application/x-protobuf")

    async def wait_for(self, names: set[str], timeout_s: float = 10.0) -> list[Received]:
        """Wait (bounded) until a span of each name has arrived."""
        async with asyncio.timeout(timeout_s):
            while not names <= {s.name for s in self.spans}:
                self.arrived.clear()
                await self.arrived.wait()
        return self.spans

    def named(self, name: str) -> list[Received]:
        return [s for s in self.spans if s.name == name]


@asynccontextmanager
async def otlp_sink() -> AsyncIterator[OtlpSink]:
    sink = OtlpSink()
    app = web.Application()
    app.router.add_post("/v1/traces", sink.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    sink.url = f"http://127.0.0.1:{runner.addresses[0][1]}/v1/traces"
    try:
        yield sink
    finally:
        await runner.cleanup()
