"""A pure, incremental Server-Sent Events parser: `feed(bytes) -> list[SSEEvent]`.

It follows the WHATWG rules that matter for OpenAI-style streams and our own: lines end in
LF, CRLF or CR (a CR at a chunk's end waits for a possible LF); `data:` lines join with LF;
lines starting with `:` are comments; a blank line dispatches; an event with no data is dropped.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SSEEvent:
    data: str
    event: str = "message"
    id: str | None = None


class SSEParser:
    __slots__ = ("_buffer", "_data", "_decoder", "_event", "_id", "_pending_cr")

    def __init__(self) -> None:
        # Incremental: a multi-byte character may be split across two chunks.
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buffer = ""
        self._data: list[str] = []
        self._event = ""
        self._id: str | None = None
        self._pending_cr = False

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        text = self._decoder.decode(chunk)
        if not text:  # an empty chunk, or half a character: a CR before it still waits for its LF
            return []
        if self._pending_cr and text.startswith("\n"):
            text = text[1:]
        self._pending_cr = text.endswith("\r")
        text = self._buffer + text
        if "\r" in text:
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        *lines, self._buffer = text.split("\n")
        events: list[SSEEvent] = []
        for line in lines:
            event = self._line(line)
            if event is not None:
                events.append(event)
        return events

    def _line(self, line: str) -> SSEEvent | None:
        if not line:
            return self._dispatch()
        if line[0] == ":":
            return None
        name, _, value = line.partition(":")
        if value[:1] == " ":
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self._id = value
        return None

    def _dispatch(self) -> SSEEvent | None:
        if not self._data:
            self._event = ""
            return None
        event = SSEEvent("\n".join(self._data), self._event or "message", self._id)
        self._data = []
        self._event = ""
        return event
