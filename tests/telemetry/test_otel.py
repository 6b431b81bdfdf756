"""The export process's exporter: a request encoded by `otlp.SpanEncoder` is sent with the SDK's
HTTP rules (the standard variables, retries)."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from agentos.telemetry.otel import OtlpExporter
from agentos.telemetry.otlp import SpanEncoder
from agentos.telemetry.wire import KINDS, SpanRecord

# a server span with a remote parent, an attribute and an event
RECORD: SpanRecord = (
    "POST /v1/sessions/{session_id}/turns",
    "0af7651916cd43dd8448eb211c80319c",
    "b7ad6b7169203331",
    "00f067aa0ba902b7",
    True,
    KINDS["server"],
    1_000,
    2_000,
    {"http.response.status_code": 200},
    [("agentos.turn.admitted", 1_500, {"agentos.permit.waits": False})],
    [],
    0,
    "",
    "rojo=1",
)


async def test_the_exporter_sends_with_the_standard_variables_and_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK's client behind `export_request`: headers and gzip from `OTEL_EXPORTER_OTLP_*`,
    a 503 retried (after the Retry-After it names: 0 s, so the test does not wait)."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-api-key=k1")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "gzip")
    answers = [web.Response(status=503, headers={"Retry-After": "0"}), web.Response(status=200)]
    bodies: list[ExportTraceServiceRequest] = []
    seen: list[tuple[str, str]] = []

    async def handle(request: web.Request) -> web.Response:
        seen.append((request.headers.get("x-api-key", ""), request.headers.get("Content-Encoding", "")))
        bodies.append(ExportTraceServiceRequest.FromString(await request.read()))
        return answers.pop(0)

    app = web.Application()
    app.router.add_post("/v1/traces", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/v1/traces"
    request = SpanEncoder("", "")([RECORD])
    exporter = OtlpExporter(endpoint=url, timeout=5)
    try:
        assert await asyncio.to_thread(exporter.export_request, request, 1)
    finally:
        exporter.shutdown()  # type: ignore[no-untyped-call]  # the SDK leaves it unannotated
        await runner.cleanup()
    assert seen == [("k1", "gzip"), ("k1", "gzip")]
    assert bodies == [request, request]
