"""The HTTP connection: deadlines on reading a request, a bound on connections per client
address, and the JSON error body for what aiohttp's parser answers itself.

aiohttp reads a request head and body with no deadline of its own (its keep-alive timer closes a
connection idle between requests only after `keepalive_timeout`, an hour by default): a client
that sends a head or a body a byte at a time holds a connection, a task and its buffers for as
long as it likes (slowloris). Here:

- `GuardedHandler`, the protocol of each connection, gives a request head
  `server.header_timeout_s` from the connection's opening, or from the first byte of a next
  request on a kept-alive connection; past it the client gets a 408 and the close (the close
  alone when it sent nothing). It refuses a connection over `server.max_connections_per_client`
  from one address with a 429 and the close. It answers the parser's own errors
  (`GARBAGE\\r\\n\\r\\n`, a header line over 8190 bytes) with `{"error": {"code", "message"}}`.
- A request whose body has not all come with its head gets `server.body_timeout_s` from the
  start of its handler, plus 1 s per `server.body_min_rate_bytes_s` bytes received; past it the
  handler's read raises `RequestTimeout` (408 through `error_middleware`), and the connection
  closes once that answer is sent. A body that came whole with its head costs one check.

A connection closed for a deadline or the per-address bound is not simply closed: its client may
still be sending, and a close with unread bytes is a reset, which can make the client's kernel
drop the answer before it is read. The server shuts its side for writing after the answer and
reads and drops what still comes for at most `LINGER_S` (`GuardedHandler._close_with`).

Answers are never timed: an event stream or a WebSocket stays open as long as it has to.
Each close is counted in `agentos_connections_closed_total{reason}` (docs/security.md).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from functools import partial
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.http_exceptions import LineTooLong
from aiohttp.http_parser import RawRequestMessage
from aiohttp.streams import StreamReader
from aiohttp.web_protocol import RequestHandler

from agentos.api.body_deadline import BodyDeadline
from agentos.api.connection_guard import MAX_LINGERING, ConnectionGuard
from agentos.api.errors import INTERNAL_MESSAGE, error_response, log_internal_error
from agentos.api.expect import AWAITS_CONTINUE, awaits_continue, take_expectation
from agentos.config import ServerConfig
from agentos.metrics import Metrics

log = logging.getLogger("agentos.api")

MAX_ECHO = 200  # the most of a parser's message (which quotes the request) put in an answer


class GuardedHandler(RequestHandler):
    """aiohttp's protocol with a deadline on each request head, the per-address bound and JSON
    error answers. The head timer is armed when the connection opens and when the first bytes of
    a next request come while the connection waits for one; a parsed head disarms it. Bytes that
    come while a request is handled (its body, a pipelined request) arm nothing: that wait is
    the body deadline's, and aiohttp's keep-alive timer bounds a pipelined head."""

    __slots__ = ("_guard", "_client", "_head_timer", "_heard", "_body", "_expired", "_linger")

    def __init__(self, manager: web.Server, *, guard: ConnectionGuard, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._guard = guard
        self._client: str | None = None
        self._head_timer: asyncio.TimerHandle | None = None
        self._heard = False  # any byte came: a timed-out head gets a 408, silence only the close
        self._body: BodyDeadline | None = None  # of the request being handled
        self._expired = False  # the body of the request being handled missed its deadline
        self._linger: asyncio.TimerHandle | None = None  # closing: the end of reading and dropping

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        guard = self._guard
        if guard.config.max_connections_per_client:
            client = _address(transport)
            if client is not None:
                if not guard.admit(client):
                    self._close_with(guard.too_many_answer)
                    return
                self._client = client
        self._arm_head_timer()

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        if self._client is not None:
            self._guard.release(self._client)
            self._client = None
        if self._body is not None:
            self._body.cancel()
            self._body = None
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
            self._guard.lingering -= 1
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        parsed = self._request_count
        super().data_received(data)
        if data:
            self._heard = True
        if self._request_count != parsed:  # a head (or a parse error) came: its deadline is met
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None
        elif data and self._head_timer is None and self._between_requests():
            self._arm_head_timer()

    def time_body(self, payload: StreamReader) -> None:
        """Give the body of the request about to be handled its deadline."""
        if self._body is not None:
            self._body.cancel()
        config = self._guard.config
        self._body = BodyDeadline(self, payload, config.body_timeout_s, config.body_min_rate_bytes_s)

    def handling(self) -> bool:
        """A request handler is running (not yet answered)."""
        return self._current_request is not None

    def body_expired(self) -> None:
        """The body of the request being handled missed its deadline: close the connection once
        the answer is sent, instead of reading the rest of the body (aiohttp lingers up to 10 s)."""
        self._guard.closed["body_timeout"].inc()
        self._expired = True  # closed once the answer is sent (`finish_response`)

    async def finish_response(
        self, request: web.BaseRequest, resp: web.StreamResponse, start_time: float | None
    ) -> tuple[web.StreamResponse, bool]:
        """Send the answer, with `Connection: close` and the close after it when:

        - its client still waits for a 100 Continue (the request was refused before its body
          was read): closed at once, instead of waiting for a body that will not come;
        - its body missed its deadline: closed lingering (`_close_with`), the rest of the body
          not read as a request's (aiohttp would read it for up to 10 s).
        """
        if awaits_continue(request):
            resp.force_close()
            self._lingering_time = 0.0
        if self._expired:
            resp.force_close()
        answered = await super().finish_response(request, resp, start_time)
        if self._expired:
            self._close_with(None)
        return answered

    def handle_error(
        self, request: web.BaseRequest, status: int = 500, exc: BaseException | None = None, message: str | None = None
    ) -> web.StreamResponse:
        """The answer to a request aiohttp could not parse (or, with no middleware to catch it,
        to a handler's error), with our JSON body; the connection closes after it."""
        if request.writer.output_size > 0:
            raise ConnectionError("the answer has begun: no room for an error")
        if status >= 500:
            error_id = log_internal_error("error handling a request from %s", request.remote)
            response = error_response(status, "internal_error", INTERNAL_MESSAGE, error_id=error_id)
        else:  # hostile or broken input: no traceback per request in the log
            log.debug("malformed request from %s: %r", request.remote, exc)
            status, code = (431, "header_too_large") if isinstance(exc, LineTooLong) else (status, "bad_request")
            text = " ".join((message or "").split())[:MAX_ECHO] or "unreadable request"
            response = error_response(status, code, f"malformed request: {text}")
        response.force_close()
        return response

    def _between_requests(self) -> bool:
        """The connection waits for a request head (no request is being handled)."""
        waiter = self._waiter
        return waiter is not None and not waiter.done()

    def _arm_head_timer(self) -> None:
        self._head_timer = self._loop.call_later(self._guard.config.header_timeout_s, self._head_expired)

    def _head_expired(self) -> None:
        self._head_timer = None
        if self.transport is None or not self._between_requests():
            return  # a request is being handled: its head came in time
        self._guard.closed["header_timeout"].inc()
        if self._heard:
            self._close_with(self._guard.head_timeout_answer)
        else:  # it sent nothing: nothing to answer, nothing to read
            self.force_close()

    def _close_with(self, answer: bytes | None) -> None:
        """Send `answer` (if any) and close so that the client can read it. A close while the
        client's bytes are unread (it is still sending a head or a body, or sent its request
        before it could see a refusal) is a reset, and a reset makes the client's kernel drop
        the answer it has not read yet. So our side is shut for writing (the client reads the
        answer, then the end) and what still comes is read and dropped (aiohttp's `data_received`
        ignores it once closing) until the client closes too, or for `LINGER_S` (2 s); at most
        `MAX_LINGERING` connections at once, past that the close is at once."""
        transport = self.transport
        if transport is None:
            return
        if answer is not None:
            transport.write(answer)
        if self._linger is not None or self._guard.lingering >= MAX_LINGERING or not transport.can_write_eof():
            self.force_close()  # the transport still sends what was written, then closes
            return
        self._guard.lingering += 1
        self._linger = self._loop.call_later(self._guard.linger_s, self.force_close)
        self._force_close = True  # aiohttp's loop takes no further request, and drops what is read
        if self._waiter is not None:
            self._waiter.cancel()
        transport.write_eof()  # the client's read ends after the answer; its EOF closes ours (eof_received)


def _address(transport: asyncio.BaseTransport) -> str | None:
    peer = transport.get_extra_info("peername")
    return peer[0] if isinstance(peer, tuple) and peer else None  # None: a Unix socket


class GuardedServer(web.Server):
    """aiohttp's server, with a `GuardedHandler` per connection."""

    def __init__(self, base: web.Server, guard: ConnectionGuard) -> None:
        super().__init__(
            base.request_handler,
            request_factory=self._make_guarded_request,
            handler_cancellation=base.handler_cancellation,
            loop=base._loop,
            **base._kwargs,
        )
        self.guard = guard
        self._base_factory = base.request_factory

    def _make_guarded_request(
        self,
        message: RawRequestMessage,
        payload: StreamReader,
        protocol: RequestHandler,
        writer: AbstractStreamWriter,
        task: asyncio.Task[None],
    ) -> web.BaseRequest:
        """The request, as the application makes it; its body timed when still to come, and an
        `Expect: 100-continue` kept for the body's reader (`agentos.api.expect`)."""
        message, waits = take_expectation(message)
        request = self._base_factory(message, payload, protocol, writer, task)
        if not payload.is_eof() and isinstance(protocol, GuardedHandler):
            if waits:  # timed from the 100 Continue: the client sends nothing before it
                start_deadline: Callable[[], None] = partial(protocol.time_body, payload)
                request[AWAITS_CONTINUE] = start_deadline
            else:
                protocol.time_body(payload)
        return request

    def __call__(self) -> RequestHandler:
        return GuardedHandler(self, loop=self._loop, guard=self.guard, **self._kwargs)


class GuardedRunner(web.AppRunner):
    __slots__ = ("_guard",)

    def __init__(self, app: web.Application, guard: ConnectionGuard, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self._guard = guard

    async def _make_server(self) -> web.Server:
        return GuardedServer(await super()._make_server(), self._guard)


def make_runner(
    app: web.Application, config: ServerConfig, metrics: Metrics, *, shutdown_timeout: float
) -> web.AppRunner:
    """The runner `agentos serve` (and `agentos.testing.serve_services`) serve `app` with.

    aiohttp's parser leaves request bodies as sent (`auto_decompress=False`): `agentos.api.body`
    decodes Content-Encoding itself, bounded by each route's limit, and answers an unknown or
    broken encoding with a JSON 4xx. (aiohttp would inflate a body before any route limit
    applied, answer `br` with a plain-text 400, and pass an unknown encoding through as it is.)
    """
    return GuardedRunner(
        app,
        ConnectionGuard(config, metrics),
        auto_decompress=False,
        handler_cancellation=True,
        access_log=None,
        shutdown_timeout=shutdown_timeout,
        keepalive_timeout=config.keepalive_timeout_s,
    )
