"""The path the export process took before it encoded OTLP itself: recorded span tuples as the
OpenTelemetry SDK's `ReadableSpan`s, for its `encode_spans`. The oracle of tests/telemetry/test_otlp.py
and the "before" of bench/scripts/otlp_encode_cost.py."""

from __future__ import annotations

from collections.abc import Iterable

from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

from agentos.telemetry.otlp import SCHEMA_URL, SCOPE_NAME, resource_for
from agentos.telemetry.wire import STATUS_ERROR, SpanRecord

_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_UNSET = Status(StatusCode.UNSET)


class SdkSpans:
    """Recorded span tuples (`wire.SpanRecord`) into `ReadableSpan`s (the removed `SpanConverter`)."""

    def __init__(self, service_name: str, node: str) -> None:
        self._resource = resource_for(service_name, node)
        self._scope = InstrumentationScope(SCOPE_NAME, schema_url=SCHEMA_URL)

    def __call__(self, records: Iterable[SpanRecord]) -> list[ReadableSpan]:
        return [self._one(record) for record in records]

    def _one(self, record: SpanRecord) -> ReadableSpan:
        name, trace_id, span_id, parent_id, remote, kind, start_ns, end_ns, attrs, events, links, code, text, state = (
            record
        )
        trace = int(trace_id, 16)
        trace_state = TraceState.from_header([state]) if state else None
        parent = SpanContext(trace, int(parent_id, 16), is_remote=remote, trace_flags=_SAMPLED) if parent_id else None
        return ReadableSpan(
            name=name,
            context=SpanContext(
                trace, int(span_id, 16), is_remote=False, trace_flags=_SAMPLED, trace_state=trace_state
            ),
            parent=parent,
            resource=self._resource,
            attributes=attrs,
            events=[Event(event, event_attributes, at_ns) for event, at_ns, event_attributes in events],
            links=[
                Link(SpanContext(int(t, 16), int(s, 16), is_remote=True, trace_flags=TraceFlags(f)), a or None)
                for t, s, f, a in links
            ],
            kind=SpanKind(kind),
            status=Status(StatusCode.ERROR, text) if code == STATUS_ERROR else _UNSET,
            start_time=start_ns,
            end_time=end_ns,
            instrumentation_scope=self._scope,
        )
