"""Server-Sent Events: the framing (pure: bytes in, bytes out) and the one writer every stream uses.

Once a stream has started, its status line is on the wire: a failure can no longer be an HTTP
error. `failures_as_events` turns one into the handler's own last event (logged under an error
id, the client told only the id) and closes the stream; a client that went away just ends it.
Any failure it does not cover (before it, after it, in a new handler) is caught by the error
middleware, which finds the open stream (`agentos.api.errors.STARTED`) and ends it the same way
with an `error` event: never a second status line in the middle of the stream.

Usage::

    stream = await SSEStream.open(request, terminal=TURN_TERMINAL)
    async with failures_as_events(stream, "turn.failed", {"turn_id": turn_id}, "turn %s", turn_id):
        await stream.send("1", "turn.started", {...})
    return stream.response
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Collection
from contextlib import asynccontextmanager, suppress
from typing import Any, TypeVar

import msgspec
from aiohttp import web

from agentos.api.errors import INTERNAL_MESSAGE, STARTED, log_internal_error
from agentos.errors import RequestError, StoreUnavailable

T = TypeVar("T")

_encode = msgspec.json.encode

SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
KEEPALIVE = b": keep-alive\n\n"


def encode_event(event_id: str | int | None, name: str, data: dict[str, Any]) -> bytes:
    """One event. Without an id the event is outside the stored stream: `Last-Event-ID` skips it."""
    # JSON never contains a raw newline, so one `data:` line is always enough.
    if event_id is None:
        return b"".join((b"event: ", name.encode(), b"\ndata: ", _encode(data), b"\n\n"))
    return b"".join((b"event: ", name.encode(), b"\nid: ", str(event_id).encode(), b"\ndata: ", _encode(data), b"\n\n"))


class SSEStream:
    """An open `text/event-stream` response; also a turn sink (`send(event_id, name, data)`).

    Remembers whether one of the `terminal` events was sent, so a failure after it adds none.
    """

    __slots__ = ("ended", "response", "_terminal")

    def __init__(self, response: web.StreamResponse, terminal: Collection[str] = ()) -> None:
        self.response = response
        self.ended = False
        self._terminal = terminal

    @classmethod
    async def open(cls, request: web.Request, terminal: Collection[str] = ()) -> SSEStream:
        """Send the status line and headers: from here on, failures are events."""
        response = web.StreamResponse(headers=SSE_HEADERS)
        await response.prepare(request)
        stream = cls(response, terminal)
        request[STARTED] = stream
        return stream

    async def send(self, event_id: str | int | None, name: str, data: dict[str, Any]) -> None:
        frame = encode_event(event_id, name, data)
        if name not in self._terminal:
            await self.response.write(frame)
            return
        # Nothing follows a terminal event: it and the stream's end (the last chunk) leave in
        # one write, one send on the socket fewer per turn than a write and then `close()`.
        await self.response.write_eof(frame)
        self.ended = True

    async def next_or_keepalive(
        self, events: AsyncIterator[T], keepalive_s: float, until: float | None = None
    ) -> T | None:
        """The next item of `events` (None at its end); while none comes (a run waiting for a
        human), a comment line every `keepalive_s` keeps proxies from closing the idle stream.
        `until` (the loop's clock): None once it passes with no item, so a stream with a time
        limit ends on time; only the wait is cut, never a write."""
        loop = asyncio.get_running_loop()
        pending = asyncio.ensure_future(anext(events, None))
        try:
            while True:
                left = keepalive_s if until is None else min(keepalive_s, until - loop.time())
                done, _ = await asyncio.wait({pending}, timeout=max(left, 0.0))
                if done:
                    return pending.result()
                if until is not None and loop.time() >= until:
                    return None
                await self.response.write(KEEPALIVE)
        finally:
            if not pending.done():  # the client went away: stop reading, let the generator unwind
                pending.cancel()
                await asyncio.wait({pending})

    async def close(self) -> None:
        with suppress(ConnectionError):  # the client may leave right after the last event
            await self.response.write_eof()

    async def end_with_failure(self, exc: Exception) -> web.StreamResponse:
        """The error middleware's end of a stream that failed (call it while `exc` is being
        handled): an `error` event, unless a terminal event was sent or the client is gone."""
        if not isinstance(exc, ConnectionError) and not self.ended:
            with suppress(ConnectionError):
                await self.send(None, "error", failure_data(exc))
        await self.close()
        return self.response


def failure_data(exc: Exception) -> dict[str, Any]:
    """The `error` event's data for `exc`: a client's or the store's error as it would have
    been answered (`code`, `message`); anything else logged, the client told its `error_id`."""
    if isinstance(exc, RequestError):
        return {"code": exc.code, "message": exc.message}
    if isinstance(exc, StoreUnavailable):
        return {"code": exc.code, "message": "the store cannot be reached; retry later"}
    error_id = log_internal_error("an event stream failed after it started")
    return {"code": "internal_error", "message": INTERNAL_MESSAGE, "error_id": error_id}


@asynccontextmanager
async def failures_as_events(
    stream: SSEStream, failed: str, data: dict[str, Any], what: str, *args: Any
) -> AsyncIterator[None]:
    """Run the body, then close the stream, whatever happened in the body.

    A client that went away (`ConnectionError`) just ends it. Any other exception is logged
    (`what % args`, with the traceback and an error id) and sent as the event `failed` with
    `data`, `message` and `error_id`, unless a terminal event was sent already. Cancellation
    is never caught.
    """
    try:
        yield
    except ConnectionError:
        return
    except Exception:
        error_id = log_internal_error(what, *args)
        if not stream.ended:
            with suppress(ConnectionError):
                await stream.send(None, failed, {**data, "message": INTERNAL_MESSAGE, "error_id": error_id})
    await stream.close()
