"""The span export process (`python -m agentos.telemetry.otel`): batches of recorded spans read
from the server's pipe, encoded for OTLP (`agentos.telemetry.otlp`) and sent by the SDK's
OTLP/HTTP exporter: endpoint, headers, timeout, compression and TLS from the standard
`OTEL_EXPORTER_OTLP_*` variables (or the `[telemetry]` settings the server passes), and its
retries with backoff on 429/502/503/504 and connection errors.

The server imports this module only when a test hands it an exporter of its own
(`shipping.ExporterSink`).
"""

from __future__ import annotations

import logging
import signal
import sys
from typing import Any

import msgspec
from opentelemetry.exporter.otlp.proto.http._common import _is_request_too_large
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from agentos.telemetry.otlp import SpanEncoder
from agentos.telemetry.wire import read_frame

log = logging.getLogger("agentos.telemetry")


class OtlpExporter(OTLPSpanExporter):
    """The SDK's OTLP/HTTP span exporter, sent a request already encoded. Its constructor
    resolves the endpoint, headers, timeout, compression and TLS from the arguments and the
    `OTEL_EXPORTER_OTLP_*` variables; `export_request` is its `export` without the encoding,
    handing the bytes to the same HTTP client (the SDK's retries and backoff). That client is
    the exporter's private `_client` (pinned SDK 1.45.2): reused rather than rewritten, so the
    wire and the retry rules stay the SDK's."""

    def export_request(self, request: ExportTraceServiceRequest, spans: int) -> bool:
        """Send `request` (of `spans` spans); True when the collector took it."""
        if self._shutdown:
            return False
        with self._metrics.export_operation(spans) as result:
            data = request.SerializePartialToString()
            if _is_request_too_large(data, self._max_request_size):
                log.warning("dropping a span batch of %d bytes (max_request_size)", len(data))
                return False
            outcome = self._client.export(data)
            if not outcome.success:
                result.error = outcome.error
                return False
        return True


def export_process(settings: dict[str, Any]) -> None:
    """Read batches from stdin until it closes, send each to the collector, and answer on stdout
    with a line per batch ("ok N" / "failed N") and per flush ("flushed K")."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the server's: it closes our stdin
    logging.basicConfig(level=logging.WARNING, format="agentos-span-export: %(levelname)s %(name)s: %(message)s")
    exporter = OtlpExporter(
        endpoint=settings["endpoint"], headers=settings.get("headers") or None, timeout=settings["timeout_s"]
    )
    encode = SpanEncoder(settings.get("service_name", ""), settings.get("node", ""))
    decode = msgspec.msgpack.Decoder(list[tuple[Any, ...]]).decode
    answers = sys.stdout
    while (frame := read_frame(sys.stdin.buffer)) is not None:
        kind, payload = frame
        if kind == b"F":
            answers.write(f"flushed {payload.decode()}\n")
        else:
            batch = decode(payload)
            try:
                ok = exporter.export_request(encode(batch), len(batch))
            except Exception:  # never let one batch end the process
                log.exception("export failed")
                ok = False
            answers.write(f"{'ok' if ok else 'failed'} {len(batch)}\n")
        answers.flush()
    exporter.shutdown()  # type: ignore[no-untyped-call]  # the SDK leaves it unannotated


if __name__ == "__main__":
    export_process(msgspec.json.decode(sys.argv[1]))
