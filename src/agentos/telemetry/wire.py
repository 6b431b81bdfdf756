"""What crosses the pipe between the server and its span export process: finished spans as plain
tuples, in length-prefixed MessagePack frames. Imports nothing of OpenTelemetry."""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Callable
from typing import IO, Any

log = logging.getLogger("agentos.telemetry")

# A finished span: (name, trace_id, span_id, parent_span_id ("" for a root), parent_is_remote,
# kind, start_ns, end_ns, attributes, events [(name, ns, attributes)], links [(trace_id, span_id,
# flags, attributes)], status_code (0 unset, 2 error), status_description, trace_state (W3C
# tracestate, "" for none))
SpanRecord = tuple[Any, ...]
_ATTRIBUTES, _EVENTS, _LINKS = 8, 9, 10  # the record's fields that hold attributes
DROP_LOG_INTERVAL_S = 60.0
KINDS = {"internal": 0, "server": 1, "client": 2, "producer": 3, "consumer": 4}  # OTel's SpanKind values
STATUS_ERROR = 2

FRAME = struct.Struct("<cI")  # a kind (b"B" a batch, b"F" a flush) and the payload's length


def frame(kind: bytes, payload: bytes) -> bytes:
    return FRAME.pack(kind, len(payload)) + payload


def read_frame(stream: IO[bytes]) -> tuple[bytes, bytes] | None:
    """The export process's side of the pipe: the next (kind, payload), None at end of input."""
    header = stream.read(FRAME.size)
    if len(header) < FRAME.size:
        return None
    kind, length = FRAME.unpack(header)
    payload = stream.read(length)
    return None if len(payload) < length else (kind, payload)


class UnencodableValues:
    """A batch MessagePack refused (an int beyond 64 bits: a tenant reaches some attributes, a
    request's `max_tokens`, a provider's usage numbers) sent again without the values it cannot
    carry: one bad attribute costs that attribute, not its batch of spans, as the SDK's encoder
    drops and logs an attribute it cannot encode. Checked only when a batch fails, never on the
    event loop: a check of every attribute as it is set cost about 0.7-1.4 us a span recorded
    (docs/observability.md, "Cost and safety")."""

    def __init__(self, encode: Callable[[Any], bytes]) -> None:
        self._encode = encode
        self.dropped = 0
        self._logged_at = -DROP_LOG_INTERVAL_S

    def carried(self, record: SpanRecord) -> SpanRecord:
        """`record`, or a copy of it without the attribute values that cannot be encoded."""
        try:
            self._encode(record)
            return record
        except (OverflowError, TypeError):
            pass
        fields = list(record)
        name = fields[0]
        fields[_ATTRIBUTES] = self._kept(name, fields[_ATTRIBUTES])
        fields[_EVENTS] = [(event, at_ns, self._kept(name, kv)) for event, at_ns, kv in fields[_EVENTS]]
        fields[_LINKS] = [(*ids, self._kept(name, kv)) for *ids, kv in fields[_LINKS]]
        return tuple(fields)

    def _kept(self, span_name: str, attributes: dict[str, Any]) -> dict[str, Any]:
        kept = {}
        for key, value in attributes.items():
            try:
                self._encode(value)
            except (OverflowError, TypeError):
                self._dropped(span_name, key)
                continue
            kept[key] = value
        return kept

    def _dropped(self, span_name: str, key: str) -> None:
        self.dropped += 1
        now = time.monotonic()
        if now - self._logged_at >= DROP_LOG_INTERVAL_S:  # a tenant can send one with every request
            self._logged_at = now
            log.warning("span %r: attribute %r cannot be encoded, dropped (%d so far)", span_name, key, self.dropped)
