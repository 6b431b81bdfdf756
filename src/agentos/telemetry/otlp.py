"""Recorded spans (`wire.SpanRecord` tuples) into one OTLP/HTTP request: the protobuf
`ExportTraceServiceRequest` written straight from the tuples, in the export process.

Why not the SDK's `ReadableSpan`s and its `encode_spans`: building a span object per record,
then encoding it attribute by attribute through generic helpers, cost 6x the CPU a span
(bench/scripts/otlp_encode_cost.py), and the export process counts in the server's cost per
turn. Here each record is written once into the request, the resource and scope once per batch.
The message is the very one `encode_spans` makes of the same spans: ids as bytes, kinds, flags,
status, events, links and every attribute type; tests/telemetry/test_otlp.py encodes the same
records both ways and asserts equal messages.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, Span, SpanFlags, Status
from opentelemetry.sdk.resources import Resource
from opentelemetry.semconv.schemas import Schemas

from agentos.telemetry.wire import STATUS_ERROR, SpanRecord

log = logging.getLogger("agentos.telemetry")
# A tenant can put an unencodable value into some attributes with every request: one line a
# minute says so, not one per span.
DROP_LOG_INTERVAL_S = 60.0

# The semantic conventions the attribute names follow (the GenAI ones from the incubating module
# of opentelemetry-semantic-conventions 0.66b2, pinned with the SDK): every span's scope says so.
SCHEMA_URL = Schemas.V1_44_0.value
SCOPE_NAME = "agentos"
# The flags the SDK writes: whether the parent is remote is known (and, for a remote parent or a
# link, that it is). A link's own trace flags are not written, as in the SDK.
_LOCAL = SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
_REMOTE = _LOCAL | SpanFlags.SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
# OTLP's kinds by the recorded kind (`wire.KINDS`: OTel's SpanKind, internal = 0); OTLP counts
# from SPAN_KIND_UNSPECIFIED = 0.
_KINDS = (
    Span.SPAN_KIND_INTERNAL,
    Span.SPAN_KIND_SERVER,
    Span.SPAN_KIND_CLIENT,
    Span.SPAN_KIND_PRODUCER,
    Span.SPAN_KIND_CONSUMER,
)


def resource_for(service_name: str, node: str) -> Resource:
    """`service.name` (the config's, else OTEL_SERVICE_NAME, else "agentos") and the node; the
    SDK's `Resource.create` reads OTEL_RESOURCE_ATTRIBUTES and adds the telemetry.sdk.* ones."""
    resource = Resource.create({"service.name": service_name} if service_name else {})
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):  # no OTEL_SERVICE_NAME
        resource = resource.merge(Resource({"service.name": "agentos"}))
    if node:
        resource = resource.merge(Resource({"service.instance.id": node}))
    return resource


def _set_value(target: AnyValue, value: Any) -> None:
    """`value` into `target` as the SDK's `_encode_value` writes it (the same order of checks:
    a bool before an int, a str before a sequence)."""
    setter = _SETTERS.get(type(value))
    if setter is not None:
        setter(target, value)
    elif value is None:
        target.SetInParent()  # present and empty, as the SDK's `AnyValue()`
    elif isinstance(value, bool):
        target.bool_value = value
    elif isinstance(value, str):
        target.string_value = value
    elif isinstance(value, int):
        target.int_value = value
    elif isinstance(value, float):
        target.double_value = value
    elif isinstance(value, bytes):
        target.bytes_value = value
    elif isinstance(value, Sequence):
        _set_array(target, value)
    elif isinstance(value, Mapping):
        target.kvlist_value.SetInParent()
        for key, item in value.items():  # one bad item fails the whole attribute, as in the SDK
            pair = target.kvlist_value.values.add()
            pair.key = str(key)
            _set_value(pair.value, item)
    else:
        raise TypeError(f"invalid attribute type {type(value)!r} of value {value!r}")


def _set_array(target: AnyValue, values: Sequence[Any]) -> None:
    array = target.array_value
    array.SetInParent()  # an empty list is an empty array, not a missing value
    for value in values:
        _set_value(array.values.add(), value)


def _set_str(target: AnyValue, value: str) -> None:
    target.string_value = value


def _set_bool(target: AnyValue, value: bool) -> None:
    target.bool_value = value


def _set_int(target: AnyValue, value: int) -> None:
    target.int_value = value


def _set_float(target: AnyValue, value: float) -> None:
    target.double_value = value


# The exact types a recorded attribute almost always has: one dict lookup instead of the chain.
_SETTERS: dict[type, Callable[[AnyValue, Any], None]] = {
    str: _set_str,
    bool: _set_bool,
    int: _set_int,
    float: _set_float,
    list: _set_array,
}


class _DropLog:
    """The dropped attributes' log line, at most once per `DROP_LOG_INTERVAL_S`."""

    def __init__(self) -> None:
        self.dropped = 0
        self._logged_at = -DROP_LOG_INTERVAL_S

    def dropped_one(self, key: str) -> None:
        self.dropped += 1
        now = time.monotonic()
        if now - self._logged_at >= DROP_LOG_INTERVAL_S:
            self._logged_at = now
            log.exception("attribute %r not encoded (%d dropped so far; logged once a minute)", key, self.dropped)


DROPS = _DropLog()


def _set_attributes(target: Any, attributes: Mapping[str, Any]) -> None:
    """`attributes` appended to a repeated `KeyValue` field; one that cannot be encoded (an int
    beyond 64 bits, a stray type) is left out and logged (`DROPS`), as the SDK does."""
    for key, value in attributes.items():
        pair: KeyValue = target.add()
        pair.key = key
        try:
            _set_value(pair.value, value)
        except Exception:
            del target[-1]
            DROPS.dropped_one(key)


class SpanEncoder:
    """Recorded span tuples (`wire.SpanRecord`) into one OTLP request: one resource, one scope,
    every span under them (what the SDK's `encode_spans` makes of the same spans)."""

    def __init__(self, service_name: str, node: str) -> None:
        resource = resource_for(service_name, node)
        self._head = ResourceSpans(schema_url=resource.schema_url)  # each request's, spans aside
        _set_attributes(self._head.resource.attributes, resource.attributes)
        self._head.scope_spans.add(scope=InstrumentationScope(name=SCOPE_NAME), schema_url=SCHEMA_URL)

    def __call__(self, records: Iterable[SpanRecord]) -> ExportTraceServiceRequest:
        request = ExportTraceServiceRequest()
        resource_spans = request.resource_spans.add()
        resource_spans.CopyFrom(self._head)
        add = resource_spans.scope_spans[0].spans.add
        for record in records:
            _encode_span(add(), *record)
        return request


def _encode_span(
    span: Span,
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
    trace_state: str,
) -> None:
    span.trace_id = bytes.fromhex(trace_id)
    span.span_id = bytes.fromhex(span_id)
    if trace_state:
        span.trace_state = trace_state
    if parent_id:
        span.parent_span_id = bytes.fromhex(parent_id)
    span.flags = _REMOTE if remote_parent and parent_id else _LOCAL
    span.name = name
    span.kind = _KINDS[kind]
    span.start_time_unix_nano = start_ns
    span.end_time_unix_nano = end_ns
    _set_attributes(span.attributes, attributes)
    for event_name, at_ns, event_attributes in events:
        event = span.events.add()
        event.name = event_name
        event.time_unix_nano = at_ns
        _set_attributes(event.attributes, event_attributes)
    for link_trace_id, link_span_id, _flags, link_attributes in links:
        link = span.links.add()
        link.trace_id = bytes.fromhex(link_trace_id)
        link.span_id = bytes.fromhex(link_span_id)
        link.flags = _REMOTE  # a link's context is always another's: remote, as the SDK says
        _set_attributes(link.attributes, link_attributes)
    span.status.SetInParent()  # the SDK always writes a status, an empty one when unset
    if status_code == STATUS_ERROR:
        span.status.code = Status.STATUS_CODE_ERROR
        span.status.message = status_description
