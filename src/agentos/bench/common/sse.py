"""A pure, incremental Server-Sent Events parser for the bench clients (no I/O).

Usage::

    parser = SSEParser()
    for chunk in body_chunks:           # split anywhere, even inside a UTF-8 character
        for event in parser.feed(chunk):
            handle(event.event, event.data)

Follows the WHATWG rules that matter here: lines end in LF, CRLF or CR; a blank line dispatches;
`data:` lines join with LF; one optional space after the colon is dropped; comment lines
(starting with `:`) are ignored; an event with no data is not dispatched.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SSEEvent:
    event: str  # "message" when the stream names none
    data: str
    event_id: str | None = None


class SSEParser:
    def __init__(self) -> None:
        self._buffer = b""
        self._event = ""
        self._data: list[str] = []
        self._event_id: str | None = None

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Add bytes; return the events they complete."""
        self._buffer += chunk
        events: list[SSEEvent] = []
        while (line := self._next_line()) is not None:
            event = self._line(line)
            if event is not None:
                events.append(event)
        return events

    def _next_line(self) -> bytes | None:
        buffer = self._buffer
        cut = _line_end(buffer)
        if cut is None:
            return None
        end, width = cut
        if buffer[end : end + 1] == b"\r" and end + 1 == len(buffer):
            return None  # a lone CR at the end may be the first half of CRLF: wait for more
        self._buffer = buffer[end + width :]
        return buffer[:end]

    def _line(self, raw: bytes) -> SSEEvent | None:
        if not raw:
            return self._dispatch()
        line = raw.decode("utf-8", errors="replace")
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self._event_id = value
        return None

    def _dispatch(self) -> SSEEvent | None:
        if not self._data:
            self._event = ""
            return None
        event = SSEEvent(self._event or "message", "\n".join(self._data), self._event_id)
        self._event, self._data = "", []
        return event


def _line_end(buffer: bytes) -> tuple[int, int] | None:
    """Index and width of the first line terminator (LF, CRLF or CR)."""
    lf, cr = buffer.find(b"\n"), buffer.find(b"\r")
    if cr == -1 and lf == -1:
        return None
    if cr == -1 or (lf != -1 and lf < cr):
        return lf, 1
    if buffer[cr + 1 : cr + 2] == b"\n":
        return cr, 2
    return cr, 1
