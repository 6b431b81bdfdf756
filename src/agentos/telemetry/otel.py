"""The OpenTelemetry side of tracing: recorded spans as the SDK's `ReadableSpan`s, sent over
OTLP/HTTP by the SDK's exporter, in the export process (`python -m agentos.telemetry.otel`).

The server itself records spans without the SDK (`agentos.telemetry.recording`) and ships them
here through a pipe (`agentos.telemetry.shipping`); this module is imported by the server only
when a test hands it an exporter of its own (`ExporterSink`). The export process reads the
standard `OTEL_*` variables it inherits (resource attributes, exporter settings) as the SDK does.
"""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.semconv.schemas import Schemas
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from agentos.telemetry.wire import STATUS_ERROR, SpanRecord, read_frame

SUCCESS = SpanExportResult.SUCCESS
# The semantic conventions the attribute names follow (the GenAI ones from the incubating module
# of opentelemetry-semantic-conventions 0.66b2, pinned with the SDK): every span's scope says so.
SCHEMA_URL = Schemas.V1_44_0.value
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_UNSET = Status(StatusCode.UNSET)


def resource_for(service_name: str, node: str) -> Resource:
    """`service.name` (the config's, else OTEL_SERVICE_NAME, else "agentos") and the node."""
    resource = Resource.create({"service.name": service_name} if service_name else {})
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):  # no OTEL_SERVICE_NAME
        resource = resource.merge(Resource({"service.name": "agentos"}))
    if node:
        resource = resource.merge(Resource({"service.instance.id": node}))
    return resource


class SpanConverter:
    """Recorded span tuples (`recording.SpanRecord`) into the SDK's `ReadableSpan`s."""

    def __init__(self, service_name: str, node: str) -> None:
        self._resource = resource_for(service_name, node)
        self._scope = InstrumentationScope("agentos", schema_url=SCHEMA_URL)

    def __call__(self, records: Iterable[SpanRecord]) -> list[ReadableSpan]:
        return [self._one(*record) for record in records]

    def _one(
        self,
        name: str,
        trace_id: str,
        span_id: str,
        parent_id: str,
        remote_parent: bool,
        kind: int,
        start_ns: int,
        end_ns: int,
        attributes: dict[str, Any],
        events: Sequence[tuple[str, int, dict[str, Any]]],
        links: Sequence[tuple[str, str, int, dict[str, Any]]],
        status_code: int,
        status_description: str,
    ) -> ReadableSpan:
        trace = int(trace_id, 16)
        return ReadableSpan(
            name=name,
            context=SpanContext(trace, int(span_id, 16), is_remote=False, trace_flags=_SAMPLED),
            parent=SpanContext(trace, int(parent_id, 16), is_remote=remote_parent, trace_flags=_SAMPLED)
            if parent_id
            else None,
            resource=self._resource,
            attributes=attributes,
            events=[Event(event, event_attributes, at_ns) for event, at_ns, event_attributes in events],
            links=[
                Link(SpanContext(int(t, 16), int(s, 16), is_remote=True, trace_flags=TraceFlags(f)), a or None)
                for t, s, f, a in links
            ],
            kind=SpanKind(kind),
            status=Status(StatusCode.ERROR, status_description) if status_code == STATUS_ERROR else _UNSET,
            start_time=start_ns,
            end_time=end_ns,
            instrumentation_scope=self._scope,
        )


def export_process(settings: dict[str, Any]) -> None:
    """Read batches from stdin until it closes, send each to the collector, and answer on stdout
    with a line per batch ("ok N" / "failed N") and per flush ("flushed K")."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the server's: it closes our stdin
    logging.basicConfig(level=logging.WARNING, format="agentos-span-export: %(levelname)s %(name)s: %(message)s")
    exporter = OTLPSpanExporter(
        endpoint=settings["endpoint"], headers=settings.get("headers") or None, timeout=settings["timeout_s"]
    )
    convert = SpanConverter(settings.get("service_name", ""), settings.get("node", ""))
    decode = msgspec.msgpack.Decoder(list[tuple[Any, ...]]).decode
    answers = sys.stdout
    while (frame := read_frame(sys.stdin.buffer)) is not None:
        kind, payload = frame
        if kind == b"F":
            answers.write(f"flushed {payload.decode()}\n")
        else:
            batch = decode(payload)
            try:
                ok = exporter.export(convert(batch)) is SUCCESS
            except Exception:  # never let one batch end the process
                logging.getLogger("agentos.telemetry").exception("export failed")
                ok = False
            answers.write(f"{'ok' if ok else 'failed'} {len(batch)}\n")
        answers.flush()
    exporter.shutdown()  # type: ignore[no-untyped-call]


if __name__ == "__main__":
    export_process(msgspec.json.decode(sys.argv[1]))
