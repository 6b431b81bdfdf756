"""The deadline of a request body that did not come whole with its head
(`agentos.api.connections`: `server.body_timeout_s`, `server.body_min_rate_bytes_s`)."""

from __future__ import annotations

import asyncio
from typing import Protocol

from aiohttp.streams import StreamReader

from agentos.errors import RequestTimeout


class BodyOwner(Protocol):
    """The connection whose request's body is timed."""

    def handling(self) -> bool: ...

    def body_expired(self) -> None: ...


class BodyDeadline:
    """The deadline of one request body: `timeout_s` from the handler's start, plus 1 s per
    `rate` bytes received; past it the body's reader raises `RequestTimeout`."""

    __slots__ = ("_protocol", "_payload", "_timeout_s", "_rate", "_start", "_handle")

    def __init__(self, protocol: BodyOwner, payload: StreamReader, timeout_s: float, rate: int) -> None:
        loop = asyncio.get_running_loop()
        self._protocol, self._payload, self._timeout_s, self._rate = protocol, payload, timeout_s, rate
        self._start = loop.time()
        self._handle: asyncio.TimerHandle | None = loop.call_at(self._start + timeout_s, self._check)
        payload.on_eof(self.cancel)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _check(self) -> None:
        loop = asyncio.get_running_loop()
        earned = self._payload.total_bytes / self._rate if self._rate else 0.0
        due = self._start + self._timeout_s + earned
        if loop.time() < due:  # the body keeps coming at the minimum rate
            self._handle = loop.call_at(due, self._check)
            return
        self._handle = None
        if not self._protocol.handling():  # answered without the body: aiohttp's lingering read bounds it
            return
        self._protocol.body_expired()
        more = f", then {self._rate} bytes/s" if self._rate else ""
        message = f"the request body did not arrive within {self._timeout_s:g} s{more} (server.body_timeout_s)"
        self._payload.set_exception(RequestTimeout(message))
