"""Tracing on: an OpenTelemetry SDK tracer of this server's own, exporting over OTLP/HTTP.

Imported only when tracing is on (`open_tracing`): the SDK, the exporter and protobuf cost
memory and start-up time that a server without tracing never pays.

The export never blocks the event loop: a finished span is appended to a bounded queue (one
deque append under the GIL); a background thread sends batches to the collector. When the queue
is full a new span is dropped and counted, and a warning is logged at most once per
`DROP_LOG_INTERVAL_S`: a collector that is down or slow costs nothing but dropped spans.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from contextlib import AbstractContextManager
from contextvars import ContextVar
from typing import Any, Unpack

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.semconv.schemas import Schemas
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from agentos.config.telemetry import TelemetryConfig, traces_endpoint
from agentos.telemetry import Attributes, RecordOptions, Span, SpanOptions, Tracing, valid_traceparent

log = logging.getLogger("agentos.telemetry")

DROP_LOG_INTERVAL_S = 60.0
# The semantic conventions the attribute names follow (the GenAI ones from the incubating module
# of opentelemetry-semantic-conventions 0.66b2, pinned with the SDK): every span's scope says so.
SCHEMA_URL = Schemas.V1_44_0.value
_KINDS = {
    "internal": SpanKind.INTERNAL,
    "server": SpanKind.SERVER,
    "client": SpanKind.CLIENT,
    "consumer": SpanKind.CONSUMER,
    "producer": SpanKind.PRODUCER,
}


_FORCED: ContextVar[tuple[str, str]] = ContextVar("agentos_forced_ids", default=("", ""))


class _ForcedIds(RandomIdGenerator):
    """Random ids, but for a span whose ids must be known beforehand (`derived_ids`): set for
    the one `start_span` call that creates it."""

    def generate_span_id(self) -> int:
        forced = _FORCED.get()[1]
        return int(forced, 16) if forced else super().generate_span_id()

    def generate_trace_id(self) -> int:
        forced = _FORCED.get()[0]
        return int(forced, 16) if forced else super().generate_trace_id()


class QueueProcessor(SpanProcessor):
    """Finished spans into a bounded queue; a daemon thread exports them in batches."""

    def __init__(self, exporter: SpanExporter, *, max_queue: int, batch_size: int, interval_s: float) -> None:
        self._exporter = exporter
        self._queue: deque[ReadableSpan] = deque()
        self._max_queue = max_queue
        self._batch_size = batch_size
        self._interval_s = interval_s
        self._wake = threading.Event()
        self._exporting = threading.Lock()
        self._stop = False
        self.exported = 0
        self.dropped = 0
        self.failed = 0
        self._last_drop_log = -DROP_LOG_INTERVAL_S
        self._thread = threading.Thread(target=self._run, name="agentos-span-export", daemon=True)
        self._thread.start()

    def on_end(self, span: ReadableSpan) -> None:
        if not span.context.trace_flags.sampled:
            return
        if len(self._queue) >= self._max_queue:
            self.dropped += 1
            now = time.monotonic()
            if now - self._last_drop_log >= DROP_LOG_INTERVAL_S:
                self._last_drop_log = now
                log.warning("span export queue full (%d): dropping spans (%d so far)", self._max_queue, self.dropped)
            return
        self._queue.append(span)
        if len(self._queue) >= self._batch_size:
            self._wake.set()

    def _run(self) -> None:
        while not self._stop:
            self._wake.wait(self._interval_s)
            self._wake.clear()
            self._drain()

    def _drain(self) -> None:
        with self._exporting:  # one exporter call at a time: the thread's, or a flush's
            self._drain_locked()

    def _drain_locked(self) -> None:
        while self._queue:
            batch = [self._queue.popleft() for _ in range(min(self._batch_size, len(self._queue)))]
            try:
                result = self._exporter.export(batch)
            except Exception:  # the exporter's own errors: never let them kill the thread
                result = SpanExportResult.FAILURE
            if result is SpanExportResult.SUCCESS:
                self.exported += len(batch)
            else:
                self.failed += len(batch)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Send what is queued and wait until the batch in flight is sent too (in the caller's
        thread: called at close, off the event loop, or by a test)."""
        if not self._exporting.acquire(timeout=timeout_millis / 1000):
            return False
        try:
            self._drain_locked()
        finally:
            self._exporting.release()
        return not self._queue

    def shutdown(self) -> None:
        self._stop = True
        self._wake.set()
        self._thread.join(timeout=5)
        self._drain()
        self._exporter.shutdown()


class _OtelSpan:
    __slots__ = ("_span",)

    def __init__(self, span: trace.Span) -> None:
        self._span = span

    def set_attribute(self, key: str, value: Any) -> None:
        self._span.set_attribute(key, value)

    def set_attributes(self, attributes: Attributes) -> None:
        self._span.set_attributes(dict(attributes))

    def add_event(self, name: str, attributes: Attributes | None = None) -> None:
        self._span.add_event(name, dict(attributes) if attributes else None)

    def record_error(self, error: BaseException | str) -> None:
        if isinstance(error, BaseException):
            self._span.record_exception(error)
            self._span.set_attribute("error.type", type(error).__name__)
            self._span.set_status(Status(StatusCode.ERROR, str(error)[:200]))
        else:
            self._span.set_attribute("error.type", error)
            self._span.set_status(Status(StatusCode.ERROR, error[:200]))

    def add_link(self, traceparent: str, attributes: Attributes | None = None) -> None:
        context = _span_context(traceparent)
        if context is not None:
            self._span.add_link(context, dict(attributes) if attributes else None)

    def end(self) -> None:
        self._span.end()

    @property
    def traceparent(self) -> str:
        return _traceparent(self._span.get_span_context())

    @property
    def trace_id(self) -> str:
        context = self._span.get_span_context()
        return format(context.trace_id, "032x") if context.is_valid else ""


def _traceparent(context: SpanContext) -> str:
    if not context.is_valid:
        return ""
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def _span_context(traceparent: str) -> SpanContext | None:
    if not valid_traceparent(traceparent):
        return None
    _, trace_id, span_id, flags = traceparent.strip().split("-")
    return SpanContext(int(trace_id, 16), int(span_id, 16), is_remote=True, trace_flags=TraceFlags(int(flags, 16)))


class OtelTracing(Tracing):
    on = True

    def __init__(self, config: TelemetryConfig, *, node: str = "", exporter: SpanExporter | None = None) -> None:
        resource = Resource.create({"service.name": config.service_name} if config.service_name else {})
        if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):  # no OTEL_SERVICE_NAME
            resource = resource.merge(Resource({"service.name": "agentos"}))
        if node:
            resource = resource.merge(Resource({"service.instance.id": node}))
        sampler = TraceIdRatioBased(config.sample_ratio)
        self._bound = sampler.bound
        self._provider = TracerProvider(resource=resource, sampler=ParentBased(sampler), id_generator=_ForcedIds())
        self._exporter = exporter or OTLPSpanExporter(
            endpoint=traces_endpoint(config), headers=config.headers or None, timeout=config.export_timeout_s
        )
        self.processor = QueueProcessor(
            self._exporter,
            max_queue=config.max_queue,
            batch_size=config.batch_size,
            interval_s=config.export_interval_s,
        )
        self._provider.add_span_processor(self.processor)
        self._tracer = self._provider.get_tracer("agentos", schema_url=SCHEMA_URL)
        self._capture = frozenset(config.capture_content)
        self._content_max = config.content_max_chars
        self.trace_url_template = config.trace_url_template
        self.slow_commit_ms = config.slow_commit_ms

    def _context(self, parent: str) -> Context | None:
        if not parent:
            return None
        span_context = _span_context(parent)
        return None if span_context is None else trace.set_span_in_context(trace.NonRecordingSpan(span_context))

    def start(self, name: str, attributes: Attributes | None = None, **options: Unpack[SpanOptions]) -> Span:
        trace_id, span_id, parent = options.get("trace_id", ""), options.get("span_id", ""), options.get("parent", "")
        token = _FORCED.set((trace_id, span_id)) if (span_id or trace_id) else None
        start_ms = options.get("start_ms")
        try:
            span = self._tracer.start_span(
                name,
                context=self._context(parent) if parent or not trace_id else Context(),
                kind=_KINDS[options.get("kind", "internal")],
                attributes=dict(attributes) if attributes else None,
                links=[Link(c) for c in map(_span_context, options.get("links", ())) if c is not None],
                start_time=None if start_ms is None else start_ms * 1_000_000,
            )
        finally:
            if token is not None:
                _FORCED.reset(token)
        return _OtelSpan(span)

    def _current(self, span: Span) -> AbstractContextManager[object]:
        assert isinstance(span, _OtelSpan)
        return trace.use_span(span._span, end_on_exit=False, record_exception=False, set_status_on_exception=False)

    def record(self, name: str, attributes: Attributes | None = None, **options: Unpack[RecordOptions]) -> None:
        end_ms = options["end_ms"]
        events = options.get("events", ())
        start: SpanOptions = {k: v for k, v in options.items() if k not in ("end_ms", "events")}  # type: ignore[assignment]
        span = self.start(name, attributes, **start)
        assert isinstance(span, _OtelSpan)
        for event, at_ms, event_attributes in events:
            span._span.add_event(event, dict(event_attributes), timestamp=at_ms * 1_000_000)
        span._span.end(end_time=max(options.get("start_ms", end_ms), end_ms) * 1_000_000)

    def traceparent(self, trace_id: str, span_id: str) -> str:
        sampled = int(trace_id[16:], 16) < self._bound  # TraceIdRatioBased's own rule
        return f"00-{trace_id}-{span_id}-{'01' if sampled else '00'}"

    def link_current(self, traceparent: str, attributes: Attributes | None = None) -> None:
        context = _span_context(traceparent)
        current = trace.get_current_span()
        if context is not None and current.is_recording():
            current.add_link(context, dict(attributes) if attributes else None)

    def event(self, name: str, attributes: Attributes | None = None) -> None:
        current = trace.get_current_span()
        if current.is_recording():
            current.add_event(name, dict(attributes) if attributes else None)

    def current_traceparent(self) -> str:
        return _traceparent(trace.get_current_span().get_span_context())

    def capture(self, tenant_id: str) -> int:
        return self._content_max if ("*" in self._capture or tenant_id in self._capture) else 0

    def statistics(self) -> dict[str, int]:
        p = self.processor
        return {"exported": p.exported, "dropped": p.dropped, "failed": p.failed, "queued": len(p._queue)}

    def flush(self, timeout_s: float = 5.0) -> bool:
        return self.processor.force_flush(int(timeout_s * 1000))

    def shutdown(self) -> None:
        self._provider.shutdown()
