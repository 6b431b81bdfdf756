"""The tracing facade: off costs no import, on builds spans of this server's own, continues a
caller's trace, links, and drops (counted) rather than block when the exporter cannot keep up."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from agentos.config.telemetry import TelemetryConfig, traces_endpoint, tracing_wanted
from agentos.telemetry import NO_TRACING, shipping, trace_id_of, valid_traceparent
from agentos.telemetry.opening import open_tracing
from agentos.telemetry.recording import RecordingTracing
from tests.telemetry.otlp_sink import MemoryExporter

CALLER = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_off_imports_nothing_of_opentelemetry() -> None:
    code = (
        "import sys\n"
        "from agentos.config.telemetry import TelemetryConfig\n"
        "from agentos.telemetry import NO_TRACING\n"
        "from agentos.telemetry.opening import open_tracing\n"
        "assert open_tracing(TelemetryConfig()) is NO_TRACING\n"
        "with NO_TRACING.span('x') as s: s.set_attribute('a', 1)\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    env = {"PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.strip() == "[]"


def test_the_standard_variables_turn_it_on_and_name_the_endpoint() -> None:
    config = TelemetryConfig()
    assert not tracing_wanted(config, {})
    assert tracing_wanted(config, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})
    assert not tracing_wanted(config, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"})
    assert not tracing_wanted(TelemetryConfig(enabled=False), {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})
    assert traces_endpoint(config, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"}) == "http://c:4318/v1/traces"
    assert traces_endpoint(config, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t/x"}) == "http://t/x"
    assert traces_endpoint(TelemetryConfig(endpoint="http://mine/v1/traces"), {}) == "http://mine/v1/traces"


def test_traceparents_are_checked() -> None:
    assert valid_traceparent(CALLER)
    assert trace_id_of(CALLER) == "0af7651916cd43dd8448eb211c80319c"
    for bad in ("", "00-xyz", CALLER.upper(), "00-" + "0" * 32 + "-b7ad6b7169203331-01", CALLER + "-extra"):
        assert not valid_traceparent(bad), bad


def _tracing(exporter: shipping.RequestExporter, **config: Any) -> RecordingTracing:
    tracing = open_tracing(TelemetryConfig(enabled=True, **config), node="node-1", exporter=exporter)
    assert isinstance(tracing, RecordingTracing)
    return tracing


def test_spans_nest_continue_a_callers_trace_and_link() -> None:
    exporter = MemoryExporter()
    tracing = _tracing(exporter)
    with tracing.span("POST /v1/sessions/{id}/turns", kind="server", parent=CALLER) as request:
        with tracing.span("turn", {"session.id": "s1"}) as turn:
            assert tracing.current_traceparent() == turn.traceparent
        follower = tracing.start("turn", links=[turn.traceparent])
        follower.end()
    assert tracing.flush()
    spans = {s.name: s for s in exporter.finished() if s.name != "turn"}
    turns = [s for s in exporter.finished() if s.name == "turn"]
    server = spans["POST /v1/sessions/{id}/turns"]
    assert server.trace_id == trace_id_of(CALLER) == request.trace_id
    assert server.parent_span_id == "b7ad6b7169203331"
    assert turns[0].parent_span_id == server.span_id
    assert turns[1].links == [(turns[0].trace_id, turns[0].span_id)]
    assert server.resource["service.instance.id"] == "node-1"
    assert server.resource["service.name"] == "agentos"
    tracing.shutdown()


def test_an_error_escaping_a_span_is_recorded_on_it() -> None:
    exporter = MemoryExporter()
    tracing = _tracing(exporter)
    try:
        with tracing.span("execute_tool run_command"):
            raise ValueError("boom")
    except ValueError:
        pass
    tracing.flush()
    (span,) = exporter.finished()
    assert span.attributes["error.type"] == "ValueError"
    assert span.events == ["exception"]
    assert span.status_code == 2  # STATUS_CODE_ERROR
    tracing.shutdown()


class _Stuck:
    """A collector that does not answer until released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()

    def export_request(self, request: ExportTraceServiceRequest, spans: int) -> bool:
        self.entered.set()
        self.release.wait(10)
        return True

    def shutdown(self) -> None:
        self.release.set()


def test_a_stuck_collector_costs_dropped_spans_not_a_blocked_caller() -> None:
    exporter = _Stuck()
    tracing = _tracing(exporter, max_queue=16, batch_size=1)
    tracing.start("first").end()
    assert exporter.entered.wait(5)  # the export thread is now stuck in the collector
    for _ in range(100):
        tracing.start("more").end()  # returns at once: the queue holds 16, the rest are dropped
    stats = tracing.statistics()
    assert stats["queued"] == 16 and stats["dropped"] == 100 - 16
    exporter.release.set()
    assert tracing.flush()
    assert tracing.statistics()["exported"] == 1 + 16
    tracing.shutdown()


def test_content_is_captured_only_for_the_tenants_named() -> None:
    tracing = _tracing(MemoryExporter(), capture_content=["t1"], content_max_chars=50)
    assert tracing.capture("t1") == 50 and tracing.capture("t2") == 0
    assert NO_TRACING.capture("t1") == 0
    tracing.shutdown()


def test_json_log_lines_carry_the_trace_of_the_moment() -> None:
    import json
    import logging

    from agentos.telemetry.logs import JsonLineFormatter, stamp

    tracing = _tracing(MemoryExporter())
    formatter = JsonLineFormatter()

    def line(message: str) -> dict[str, str]:
        record = logging.LogRecord("agentos", logging.INFO, __file__, 1, message, None, None)
        stamp(record)  # on the loop, when the record is made
        return dict(json.loads(formatter.format(record)))  # on the log thread, later

    with tracing.span("turn") as span:
        inside = line("turn t1 completed")
    outside = line("idle")
    assert inside["trace_id"] == span.trace_id and inside["span_id"] == span.traceparent.split("-")[2]
    assert inside["message"] == "turn t1 completed" and inside["level"] == "INFO"
    assert outside["trace_id"] == "" and outside["span_id"] == ""
    tracing.shutdown()


def test_a_runs_view_names_its_trace_and_links_it_only_when_sampled() -> None:
    from agentos.agents.traces import RunTraces
    from agentos.telemetry import derived_ids

    run_id = "run_0123456789abcdef0123"
    trace_id = derived_ids(run_id)[0]
    template = "https://grafana.example/explore?traceId={trace_id}"
    assert RunTraces(NO_TRACING).view(run_id) == {}  # off: nothing
    every = _tracing(MemoryExporter(), trace_url_template=template)
    link = f"https://grafana.example/explore?traceId={trace_id}"
    assert RunTraces(every).view(run_id) == {"trace_id": trace_id, "trace_url": link}
    plain = _tracing(MemoryExporter())
    assert RunTraces(plain).view(run_id) == {"trace_id": trace_id}  # no template
    none = _tracing(MemoryExporter(), trace_url_template=template, sample_ratio=0.0)
    assert RunTraces(none).view(run_id) == {"trace_id": trace_id}  # not sampled: no trace to open
    for tracing in (every, plain, none):
        tracing.shutdown()


def test_on_the_server_records_without_the_sdk_and_a_down_collector_costs_failed_spans() -> None:
    """The SDK and the OTLP encoder load in the export process only; a collector that refuses
    connections costs spans counted as failed, never an error in the server."""
    code = (
        "import sys\n"
        "from agentos.config.telemetry import TelemetryConfig\n"
        "from agentos.telemetry.opening import open_tracing\n"
        "t = open_tracing(TelemetryConfig(enabled=True, endpoint='http://127.0.0.1:9/v1/traces', export_timeout_s=1))\n"
        "with t.span('turn') as s: s.set_attribute('a', 1)\n"
        "assert t.flush(30), t.statistics()\n"
        "print(t.statistics()['failed'], sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
        "t.shutdown()\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.split() == ["1", "[]"]


def test_an_export_process_that_dies_is_started_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shipping, "RESTART_INTERVAL_S", 0.0)
    tracing, sink, first = _down_collector()
    with sink._answered:  # the dead process's reader, once at its end, waits here for the flush below
        first.kill()
        first.wait(10)
        answers = first.stdout
        assert answers is not None
        _wait_until(lambda: answers.closed)
        tracing.start("after the death").end()
        # Found at -n 3: the dead process's late reader settled this flush, sent to the new process,
        # before the new one had answered (failed was still 0).
        assert tracing.flush(30)  # answered by a new export process
    again = sink._process
    assert again is not None and again is not first and again.poll() is None
    assert tracing.statistics()["failed"] == 1  # the collector is down: the span is counted, not lost silently
    tracing.shutdown()


def _down_collector() -> tuple[RecordingTracing, shipping.ProcessSink, subprocess.Popen[bytes]]:
    """Tracing on, its collector refusing connections; the sink and the export process it writes to."""
    tracing = open_tracing(TelemetryConfig(enabled=True, endpoint="http://127.0.0.1:9/v1/traces", export_timeout_s=1))
    assert isinstance(tracing, RecordingTracing) and isinstance(tracing.shipper, shipping.Shipper)
    sink = tracing.shipper._sink
    assert isinstance(sink, shipping.ProcessSink) and sink._process is not None
    return tracing, sink, sink._process


def _wait_until(done: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)  # noqa: TID251 -- a pipe closed in another thread signals no event: polled


def test_spans_in_the_pipe_of_an_export_process_that_dies_are_counted_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shipping, "RESTART_INTERVAL_S", 0.0)
    tracing, sink, first = _down_collector()
    os.kill(first.pid, signal.SIGSTOP)  # it reads nothing more: what is written waits in its pipe
    for name in ("one", "two", "three"):
        tracing.start(name).end()
    assert not tracing.flush(0.5)  # the batch is written (the pipe holds it); no answer comes
    assert tracing.statistics()["failed"] == 0
    first.kill()
    first.wait(10)
    _wait_until(lambda: tracing.statistics()["failed"] == 3)  # counted when its answers end
    stats = tracing.statistics()
    assert (stats["exported"], stats["dropped"], stats["queued"]) == (0, 0, 0), stats
    tracing.start("after the death").end()
    assert tracing.flush(30)  # answered by a new export process (the collector is down: failed)
    assert tracing.statistics()["failed"] == 4
    tracing.shutdown()
