"""Which tracing a server gets: kept apart from the facade so that `agentos.telemetry.otel`
(which implements the facade) is imported from here alone, and only when tracing is on."""

from __future__ import annotations

import logging

from agentos.config.telemetry import TelemetryConfig, tracing_wanted
from agentos.telemetry import NO_TRACING, Tracing

log = logging.getLogger("agentos.telemetry")


def open_tracing(config: TelemetryConfig, *, node: str = "") -> Tracing:
    """The tracing `config` asks for: `NO_TRACING` when off (nothing of OpenTelemetry imported),
    else an SDK tracer of this server's own. Without the `telemetry` extra installed, tracing
    asked for is refused with one clear log line and the server runs untraced."""
    if not tracing_wanted(config):
        return NO_TRACING
    try:
        from agentos.telemetry.otel import OtelTracing  # the SDK: only now
    except ImportError as exc:
        log.warning(
            "telemetry: tracing is on but OpenTelemetry is not installed (%s); pip install 'agentos[telemetry]'",
            exc.name,
        )
        return NO_TRACING
    return OtelTracing(config, node=node)
