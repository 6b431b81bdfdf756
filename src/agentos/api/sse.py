"""Server-Sent Events framing. Pure: bytes in, bytes out."""

from __future__ import annotations

from typing import Any

import msgspec

_encode = msgspec.json.encode


def encode_event(event_id: str, name: str, data: dict[str, Any]) -> bytes:
    # JSON never contains a raw newline, so one `data:` line is always enough.
    return b"".join((b"event: ", name.encode(), b"\nid: ", event_id.encode(), b"\ndata: ", _encode(data), b"\n\n"))
