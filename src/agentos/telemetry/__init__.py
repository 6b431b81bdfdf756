"""Traces, behind one small facade: `Tracing`.

Off (the default), `NO_TRACING` answers every call with shared null objects and no OpenTelemetry
module is ever imported: the hot path pays one attribute test (`tracing.on`) where it would build
attributes, nothing else. On, `agentos.telemetry.opening.open_tracing` builds a tracer of this
server's own (never a process-global one: several nodes in one test process each trace on their
own) that records spans as tuples (`agentos.telemetry.recording`) and ships them to an export
process that sends them with the OpenTelemetry SDK's OTLP/HTTP exporter
(`agentos.telemetry.shipping`, `agentos.telemetry.otlp`, `agentos.telemetry.otel`).

Span names and attributes follow the OpenTelemetry GenAI semantic conventions
(`agentos.telemetry.names`); docs/observability.md lists them.

Usage::

    with tracing.span("execute_tool run_command", {"gen_ai.tool.name": "run_command"}) as span:
        ...
        span.set_attribute("process.exit.code", 0)
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Literal, Protocol, Required, TypedDict, Unpack

Kind = Literal["internal", "server", "client", "consumer", "producer"]
Attributes = Mapping[str, Any]


class Span(Protocol):
    """What instrumented code may do with a span (a no-op when tracing is off)."""

    def set_attribute(self, key: str, value: Any) -> None: ...

    def set_attributes(self, attributes: Attributes) -> None: ...

    def add_event(self, name: str, attributes: Attributes | None = None) -> None: ...

    def record_error(self, error: BaseException | str) -> None: ...

    def add_link(self, traceparent: str, attributes: Attributes | None = None) -> None:
        """Link this span to another (a successor known only after it started)."""
        ...

    def end(self) -> None: ...

    @property
    def traceparent(self) -> str:
        """The W3C traceparent naming this span ("" when not recorded)."""
        ...

    @property
    def trace_id(self) -> str: ...

    @property
    def tracestate(self) -> str:
        """The W3C tracestate to pass on beside `traceparent` ("" for none)."""
        ...


class _NullSpan:
    __slots__ = ()

    def set_attribute(self, key: str, value: Any) -> None:
        return None

    def set_attributes(self, attributes: Attributes) -> None:
        return None

    def add_event(self, name: str, attributes: Attributes | None = None) -> None:
        return None

    def record_error(self, error: BaseException | str) -> None:
        return None

    def add_link(self, traceparent: str, attributes: Attributes | None = None) -> None:
        return None

    def end(self) -> None:
        return None

    @property
    def traceparent(self) -> str:
        return ""

    @property
    def trace_id(self) -> str:
        return ""

    @property
    def tracestate(self) -> str:
        return ""


NULL_SPAN: Span = _NullSpan()
_NO_SCOPE: AbstractContextManager[Span] = nullcontext(NULL_SPAN)  # stateless: one for every block


class SpanOptions(TypedDict, total=False):
    """Where a span goes. `kind`: internal (default), server, client...; `parent`: a W3C
    traceparent to continue (else the current span); `tracestate`: the W3C tracestate that came
    with `parent` (checked: `agentos.telemetry.tracestate`); `links`: traceparents of spans this one
    follows from; `span_id`: the span's own id, where it must be known beforehand
    (`derived_ids`); `trace_id`: a root span's trace id (the same); `start_ms`: when it began,
    epoch milliseconds (else now)."""

    kind: Kind
    parent: str
    tracestate: str
    links: Sequence[str]
    span_id: str
    trace_id: str
    start_ms: int


class RecordOptions(SpanOptions, total=False):
    """`SpanOptions`, and when it ended (`end_ms`, required with `start_ms`) and its events:
    (name, epoch milliseconds, attributes)."""

    end_ms: Required[int]
    events: Sequence[tuple[str, int, Attributes]]


class Tracing:
    """No tracing: every method is a no-op (`NO_TRACING`).
    `agentos.telemetry.recording.RecordingTracing` is the real one, with the same methods."""

    on = False
    trace_url_template = ""
    slow_commit_ms = 0.0  # a turn's answer commit this slow or slower gets its span

    def start(self, name: str, attributes: Attributes | None = None, **options: Unpack[SpanOptions]) -> Span:
        """A span not made current: end it with `end()` (`SpanOptions` says what each option
        does)."""
        return NULL_SPAN

    def span(
        self, name: str, attributes: Attributes | None = None, **options: Unpack[SpanOptions]
    ) -> AbstractContextManager[Span]:
        """A span made current for the block, ended after it; an exception escaping the block
        (not a cancel) is recorded on it."""
        return _NO_SCOPE

    def record(self, name: str, attributes: Attributes | None = None, **options: Unpack[RecordOptions]) -> None:
        """A span that already happened, sent at once: a run's root (known whole only at its
        end, on whichever node ends it) or a human's wait (asked on one node, answered on
        another). See `RecordOptions`."""
        return None

    def traceparent(self, trace_id: str, span_id: str) -> str:
        """The traceparent of a span known by its ids (`derived_ids`), sampled or not as this
        tracer would sample its trace ("" when off)."""
        return ""

    def link_current(self, traceparent: str, attributes: Attributes | None = None) -> None:
        """Link the current span (a request's) to another trace's span (the run it started)."""
        return None

    def event(self, name: str, attributes: Attributes | None = None) -> None:
        """An event on the current span (admission decided, a retry)."""
        return None

    def current_traceparent(self) -> str:
        """The current span's traceparent ("" when none or off): what a journal keeps."""
        return ""

    def capture(self, tenant_id: str) -> int:
        """How many characters of content may be recorded for `tenant_id` (0: none)."""
        return 0

    def statistics(self) -> dict[str, int]:
        """Spans exported, dropped (queue full) and failed (the collector refused or was down)."""
        return {}

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Send what is recorded and wait for the exporter's answer (off the loop: at close, in
        tests)."""
        return True

    def shutdown(self) -> None:
        return None


NO_TRACING = Tracing()


def trace_context(span: Span) -> dict[str, str]:
    """What passes `span`'s context on (an outbound call's headers, an MCP request's `_meta`):
    its `traceparent`, and the `tracestate` of its trace when it has one (W3C Trace Context)."""
    if span.tracestate:
        return {"traceparent": span.traceparent, "tracestate": span.tracestate}
    return {"traceparent": span.traceparent}


def trace_id_of(traceparent: str) -> str:
    """The trace id inside a W3C traceparent (`00-<trace id>-<span id>-<flags>`); "" if malformed."""
    parts = traceparent.split("-")
    if len(parts) != 4 or len(parts[1]) != 32:
        return ""
    return parts[1]


def valid_traceparent(value: str) -> bool:
    """A W3C traceparent of version 00 with a non-zero trace id and span id, hex only."""
    parts = value.strip().split("-")
    if len(parts) != 4 or [len(p) for p in parts] != [2, 32, 16, 2]:
        return False
    if not all(c in "0123456789abcdef" for c in "".join(parts)):
        return False
    return parts[0] != "ff" and parts[1] != "0" * 32 and parts[2] != "0" * 16


def derived_ids(*parts: str) -> tuple[str, str]:
    """A trace id and a span id that are a function of `parts` (a run id, a step): every node,
    before or after a crash, names the same span the same way without storing anything."""
    digest = hashlib.sha256("\x00".join(("agentos", *parts)).encode()).hexdigest()
    return digest[:32], digest[32:48]
