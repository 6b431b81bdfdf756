"""JSON log lines that carry the trace (`telemetry.log_format = "json"`).

Log lines are formatted on a thread of their own (`agentos.server`), where the event loop's
context is not visible: the trace and span ids are read when the record is made, on the loop
(`stamp`), and written by the formatter later. With tracing off no span is ever current and the
ids are empty; the lines are JSON all the same.
"""

from __future__ import annotations

import json
import logging
import time

from agentos.telemetry.recording import current_ids


def stamp(record: logging.LogRecord) -> None:
    """Give `record` the current span's `trace_id` and `span_id` ("" outside any span)."""
    trace_id, span_id = current_ids()
    record.trace_id = trace_id
    record.span_id = span_id


class JsonLineFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message, trace_id,
    span_id, and the traceback as `exception` when there is one; `fields` are added to every line
    (a worker's number and pid, `agentos serve --workers`)."""

    def __init__(self, fields: dict[str, object] | None = None) -> None:
        super().__init__()
        self._fields = fields or {}

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "trace_id": getattr(record, "trace_id", ""),
            "span_id": getattr(record, "span_id", ""),
        }
        line.update(self._fields)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)
