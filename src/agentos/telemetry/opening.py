"""Which tracing a server gets: `NO_TRACING`, or spans recorded here and exported by a process of
their own (`agentos.telemetry.recording`, `shipping`, `otel`)."""

from __future__ import annotations

import importlib.metadata
import logging

from agentos.config.telemetry import TelemetryConfig, traces_endpoint, tracing_wanted
from agentos.telemetry import NO_TRACING, Tracing
from agentos.telemetry.recording import RecordingTracing
from agentos.telemetry.shipping import Counts, ExporterSink, ProcessSink, RequestExporter, Shipper, Sink

log = logging.getLogger("agentos.telemetry")
# Looked up by distribution, not imported: the server process never loads OpenTelemetry.
_NEEDED = ("opentelemetry-sdk", "opentelemetry-exporter-otlp-proto-http")


def open_tracing(config: TelemetryConfig, *, node: str = "", exporter: RequestExporter | None = None) -> Tracing:
    """The tracing `config` asks for: `NO_TRACING` when off (nothing of OpenTelemetry imported),
    else spans of this server's own, sent over OTLP/HTTP by the export process, or to `exporter`
    (`shipping.RequestExporter`, called in a thread of this process) when one is given. Without the
    `telemetry` extra installed, tracing asked for is refused with one clear log line and the
    server runs untraced."""
    if exporter is None and not tracing_wanted(config):
        return NO_TRACING
    missing = [name for name in _NEEDED if not _installed(name)]
    if exporter is None and missing:
        log.warning(
            "telemetry: tracing is on but OpenTelemetry is not installed (%s); pip install 'agentos[telemetry]'",
            missing[0],
        )
        return NO_TRACING

    def sink(counts: Counts) -> Sink:
        if exporter is not None:
            return ExporterSink(counts, exporter, config.service_name, node)
        settings = {
            "endpoint": traces_endpoint(config),
            "headers": config.headers,
            "timeout_s": config.export_timeout_s,
            "service_name": config.service_name,
            "node": node,
        }
        return ProcessSink(counts, settings)

    shipper = Shipper(
        sink, max_queue=config.max_queue, batch_size=config.batch_size, interval_s=config.export_interval_s
    )
    return RecordingTracing(
        shipper,
        sample_ratio=config.sample_ratio,
        capture_content=frozenset(config.capture_content),
        content_max_chars=config.content_max_chars,
        trace_url_template=config.trace_url_template,
        slow_commit_ms=config.slow_commit_ms,
    )


def _installed(distribution: str) -> bool:
    try:
        importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True
