"""What crosses the pipe between the server and its span export process: finished spans as plain
tuples, in length-prefixed MessagePack frames. Imports nothing of OpenTelemetry."""

from __future__ import annotations

import struct
from typing import IO, Any

# A finished span: (name, trace_id, span_id, parent_span_id ("" for a root), parent_is_remote,
# kind, start_ns, end_ns, attributes, events [(name, ns, attributes)], links [(trace_id, span_id,
# flags, attributes)], status_code (0 unset, 2 error), status_description)
SpanRecord = tuple[Any, ...]
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
