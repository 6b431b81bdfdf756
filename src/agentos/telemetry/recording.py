"""Tracing on: spans recorded in this process as plain tuples, shipped to an exporter elsewhere.

Why not the OpenTelemetry SDK's own spans on the event loop: measured on this project's 2-core
VMs, an SDK span costs about 50 us to start and end and about 75 us more to encode for OTLP, and a
turn makes four of them: about a third of a turn's whole CPU (docs/observability.md, "Cost").
Here a span is a small slotted object with W3C ids, ended into a tuple on a bounded queue
(`agentos.telemetry.shipping`); the OTLP encoding (the same message the SDK's encoder makes) and
the HTTP export, with the SDK's exporter, run in a process of their own (`agentos.telemetry.otlp`, `otel`),
and the loop pays a few microseconds a span. Sampling follows the SDK's ParentBased(TraceIdRatioBased) rule to
the bit, so that a trace is sampled the same way on every node and by the SDK in other services.

This module imports nothing of OpenTelemetry.
"""

from __future__ import annotations

import random
import time
import traceback
from contextvars import ContextVar
from types import TracebackType
from typing import Any, Protocol, Unpack

from agentos.telemetry import Attributes, RecordOptions, Span, SpanOptions, Tracing, valid_traceparent
from agentos.telemetry.wire import KINDS, STATUS_ERROR, SpanRecord


class Shipper(Protocol):
    """Where ended spans go (`agentos.telemetry.shipping.Shipper`)."""

    def put(self, record: SpanRecord) -> None: ...

    def statistics(self) -> dict[str, int]: ...

    def flush(self, timeout_s: float = 5.0) -> bool: ...

    def close(self) -> None: ...


class RecordedSpan:
    """One span in flight (the facade's `Span`). A span that is not sampled keeps its ids (they
    travel in traceparents) and records nothing."""

    __slots__ = (
        "name",
        "trace_id",
        "span_id",
        "parent_id",
        "remote_parent",
        "tracestate",
        "kind",
        "start_ns",
        "attributes",
        "events",
        "links",
        "status",
        "sampled",
        "_ship",
        "_ended",
    )

    def __init__(
        self, ship: Any, name: str, ids: tuple[str, str, str, bool, str], sampled: bool, kind: int, start_ns: int
    ) -> None:
        # tracestate: the W3C tracestate of the trace as it reached this span (the caller's,
        # checked by `agentos.telemetry.tracestate`), carried by every span under it
        self.trace_id, self.span_id, self.parent_id, self.remote_parent, self.tracestate = ids
        self.name = name
        self.sampled = sampled
        self.kind = kind
        self.start_ns = start_ns
        self.attributes: dict[str, Any] = {}
        self.events: list[tuple[str, int, dict[str, Any]]] = []
        self.links: list[tuple[str, str, int, dict[str, Any]]] = []
        self.status: tuple[int, str] = (0, "")
        self._ship = ship
        self._ended = False

    def set_attribute(self, key: str, value: Any) -> None:
        if self.sampled:
            self.attributes[key] = value

    def set_attributes(self, attributes: Attributes) -> None:
        if self.sampled:
            self.attributes.update(attributes)

    def add_event(self, name: str, attributes: Attributes | None = None, at_ns: int | None = None) -> None:
        if self.sampled:
            self.events.append((name, time.time_ns() if at_ns is None else at_ns, dict(attributes or {})))

    def record_error(self, error: BaseException | str) -> None:
        if not self.sampled:
            return
        if isinstance(error, BaseException):
            stack = "".join(traceback.format_exception(type(error), error, error.__traceback__))
            self.add_event(
                "exception",
                {
                    "exception.type": type(error).__name__,
                    "exception.message": str(error),
                    "exception.stacktrace": stack,
                },
            )
            error_type, description = type(error).__name__, str(error)
        else:
            error_type, description = error, error
        self.attributes["error.type"] = error_type
        self.status = (STATUS_ERROR, description[:200])

    def add_link(self, traceparent: str, attributes: Attributes | None = None) -> None:
        if self.sampled and valid_traceparent(traceparent):
            _, trace_id, span_id, flags = traceparent.strip().split("-")
            self.links.append((trace_id, span_id, int(flags, 16), dict(attributes or {})))

    def end(self, end_ns: int | None = None) -> None:
        if self._ended:
            return
        self._ended = True
        if self.sampled:
            self._ship(
                (
                    self.name,
                    self.trace_id,
                    self.span_id,
                    self.parent_id,
                    self.remote_parent,
                    self.kind,
                    self.start_ns,
                    time.time_ns() if end_ns is None else end_ns,
                    self.attributes,
                    self.events,
                    self.links,
                    *self.status,
                    self.tracestate,
                )
            )

    @property
    def traceparent(self) -> str:
        return f"00-{self.trace_id}-{self.span_id}-{'01' if self.sampled else '00'}"


# The current span of this task (what a child span and `current_traceparent` read).
CURRENT: ContextVar[RecordedSpan | None] = ContextVar("agentos_current_span", default=None)


def current_ids() -> tuple[str, str]:
    """The current span's trace and span ids ("", "" outside any span): for log lines."""
    span = CURRENT.get()
    return ("", "") if span is None else (span.trace_id, span.span_id)


class SpanScope:
    """`RecordingTracing.span`'s block: the span current inside it, an exception escaping it
    (not a cancel: that is how a superseded turn ends) recorded, the span ended after it. A
    class rather than a generator: `contextmanager` cost about 2 us a span on the event loop
    (bench/scripts/otlp_encode_cost.py, "record")."""

    __slots__ = ("_span", "_token")

    def __init__(self, span: RecordedSpan) -> None:
        self._span = span

    def __enter__(self) -> RecordedSpan:
        self._token = CURRENT.set(self._span)
        return self._span

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        CURRENT.reset(self._token)
        if isinstance(error, Exception):
            self._span.record_error(error)
        self._span.end()


class RecordingTracing(Tracing):
    """The facade, on: spans recorded here, shipped by `shipper` (a `shipping.Shipper`)."""

    on = True

    def __init__(
        self,
        shipper: Shipper,
        *,
        sample_ratio: float,
        capture_content: frozenset[str] = frozenset(),
        content_max_chars: int = 2000,
        trace_url_template: str = "",
        slow_commit_ms: float = 10.0,
    ) -> None:
        self.shipper = shipper
        self._ship = shipper.put
        # TraceIdRatioBased's bound: a trace is sampled when the low 64 bits of its id are below it.
        self._bound = round(sample_ratio * (2**64))
        self._capture = capture_content
        self._content_max = content_max_chars
        self.trace_url_template = trace_url_template
        self.slow_commit_ms = slow_commit_ms

    def _sampled(self, trace_id: str) -> bool:
        return int(trace_id[16:], 16) < self._bound

    def _open(self, name: str, attributes: Attributes | None, options: SpanOptions) -> RecordedSpan:
        parent, trace_id = options.get("parent", ""), options.get("trace_id", "")
        span_id = options.get("span_id", "") or f"{random.getrandbits(64) or 1:016x}"
        if parent and valid_traceparent(parent):  # a remote parent: the caller's, or a journal's
            _, parent_trace, parent_span, flags = parent.strip().split("-")
            state = options.get("tracestate", "")
            ids, sampled = (parent_trace, span_id, parent_span, True, state), bool(int(flags, 16) & 1)
        elif not parent and not trace_id and (current := CURRENT.get()) is not None:
            ids, sampled = (current.trace_id, span_id, current.span_id, False, current.tracestate), current.sampled
        else:  # a root: a new trace, or one whose id is derived from a run's
            trace_id = trace_id or f"{random.getrandbits(128) or 1:032x}"
            ids, sampled = (trace_id, span_id, "", False, ""), self._sampled(trace_id)
        start_ms = options.get("start_ms")
        span = RecordedSpan(
            self._ship,
            name,
            ids,
            sampled,
            KINDS[options.get("kind", "internal")],
            time.time_ns() if start_ms is None else start_ms * 1_000_000,
        )
        if sampled:
            if attributes:
                span.attributes.update(attributes)
            for link in options.get("links", ()):
                span.add_link(link)
        return span

    def start(self, name: str, attributes: Attributes | None = None, **options: Unpack[SpanOptions]) -> Span:
        return self._open(name, attributes, options)

    def span(self, name: str, attributes: Attributes | None = None, **options: Unpack[SpanOptions]) -> SpanScope:
        return SpanScope(self._open(name, attributes, options))

    def record(self, name: str, attributes: Attributes | None = None, **options: Unpack[RecordOptions]) -> None:
        end_ms = options["end_ms"]
        span = self._open(name, attributes, options)
        for event, at_ms, event_attributes in options.get("events", ()):
            span.add_event(event, event_attributes, at_ns=at_ms * 1_000_000)
        span.end(max(options.get("start_ms", end_ms), end_ms) * 1_000_000)

    def traceparent(self, trace_id: str, span_id: str) -> str:
        return f"00-{trace_id}-{span_id}-{'01' if self._sampled(trace_id) else '00'}"

    def link_current(self, traceparent: str, attributes: Attributes | None = None) -> None:
        current = CURRENT.get()
        if current is not None:
            current.add_link(traceparent, attributes)

    def event(self, name: str, attributes: Attributes | None = None) -> None:
        current = CURRENT.get()
        if current is not None:
            current.add_event(name, attributes)

    def current_traceparent(self) -> str:
        current = CURRENT.get()
        return "" if current is None else current.traceparent

    def capture(self, tenant_id: str) -> int:
        return self._content_max if ("*" in self._capture or tenant_id in self._capture) else 0

    def statistics(self) -> dict[str, int]:
        return self.shipper.statistics()

    def flush(self, timeout_s: float = 5.0) -> bool:
        return bool(self.shipper.flush(timeout_s))

    def shutdown(self) -> None:
        self.shipper.close()
