"""A caller's W3C `tracestate`: validated and bounded as the Trace Context spec says, before a
span carries it, exports it (OTLP `Span.trace_state`) and passes it on.

- A list member is `key=value` with the spec's key (simple or `tenant@system`) and value
  grammar; empty members and the optional white space around each are dropped.
- One malformed member, a key twice, more than 32 members, or a header beyond 8192 characters:
  the whole tracestate is dropped ("" is returned), never an error, as the OpenTelemetry SDK's
  propagator does.
- Beyond 512 characters, members are removed as the spec says to truncate: those over 128
  characters first, then from the end, until it fits.

Pure: no I/O, nothing of OpenTelemetry.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

MAX_MEMBERS = 32
MAX_CHARS = 512  # what a vendor SHOULD propagate at least; more is cut
LONG_MEMBER_CHARS = 128  # members longer than this go first when cutting
MAX_HEADER_CHARS = 8192  # beyond this not even parsed (the SDK's bound)

_KEY = r"[a-z][_0-9a-z\-*/]{0,255}|[a-z0-9][_0-9a-z\-*/]{0,240}@[a-z][_0-9a-z\-*/]{0,13}"
_VALUE = r"[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]"
_MEMBER = re.compile(f"({_KEY})=(?:{_VALUE})")


def parse_tracestate(headers: Sequence[str]) -> str:
    """The tracestate of `headers` (each a `tracestate` header's value, in order) as it is
    carried and passed on: members joined by "," without white space; "" when absent or
    invalid."""
    if sum(len(header) + 1 for header in headers) > MAX_HEADER_CHARS + 1:
        return ""
    members: list[str] = []
    keys: set[str] = set()
    for header in headers:
        for member in header.split(","):
            member = member.strip(" \t")
            if not member:
                continue
            match = _MEMBER.fullmatch(member)
            if match is None or match.group(1) in keys:
                return ""
            keys.add(match.group(1))
            members.append(member)
    if len(members) > MAX_MEMBERS:
        return ""
    return ",".join(_within_bound(members))


def _within_bound(members: list[str]) -> list[str]:
    if len(",".join(members)) <= MAX_CHARS:
        return members
    members = [m for m in members if len(m) <= LONG_MEMBER_CHARS]
    while len(",".join(members)) > MAX_CHARS:
        members.pop()
    return members
