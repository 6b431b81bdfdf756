"""`Expect: 100-continue`: the interim answer only once a handler reads the body.

A client that sends `Expect: 100-continue` waits for `HTTP/1.1 100 Continue` before it sends
its body, so that a request the server refuses costs no upload. aiohttp answers the 100 as soon
as the route is found, before any middleware: the browser rules, auth, the rate limits,
admission and the body limit all ran after the client had been told to send, and a 100 MB
body announced to a server that refuses it was sent anyway. Here:

- `take_expectation`, called by `agentos.api.connections` as each request is made, removes
  the header (aiohttp then sends nothing) and marks a request that waits for the 100.
- `send_continue` is called by the body readers (`agentos.api.body`,
  `agentos.api.body_encoding`) after the route's checks and its Content-Length limit passed,
  right before the first read: only then does the client send, and only then does the body's
  deadline (`server.body_timeout_s`) start.
- A request answered without reading its body gets `Connection: close` and the connection
  closes after the answer (`agentos.api.connections.GuardedHandler.finish_response`): the
  client never sent the body, and aiohttp would otherwise wait up to 10 s for it.

An expectation other than `100-continue` is ignored, as RFC 9110 (10.1.1) allows, and so is
any `Expect` of an HTTP/1.0 request (it must not get a 100).
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from aiohttp.http import HttpVersion11
from aiohttp.http_parser import RawRequestMessage
from multidict import CIMultiDict, CIMultiDictProxy

CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
# Set on a request whose client waits for the 100: what starts its body's deadline once it is sent.
AWAITS_CONTINUE: web.RequestKey[Callable[[], None]] = web.RequestKey("awaits_continue")


def take_expectation(message: RawRequestMessage) -> tuple[RawRequestMessage, bool]:
    """`message` without its `Expect` header, and whether its client waits for a 100 Continue."""
    if "Expect" not in message.headers:
        return message, False
    values = message.headers.getall("Expect")
    waits = message.version == HttpVersion11 and any(
        member.strip().lower() == "100-continue" for value in values for member in value.split(",")
    )
    headers = CIMultiDictProxy(CIMultiDict((k, v) for k, v in message.headers.items() if k.lower() != "expect"))
    raw = tuple((k, v) for k, v in message.raw_headers if k.lower() != b"expect")
    return message._replace(headers=headers, raw_headers=raw), waits


async def send_continue(request: web.Request) -> None:
    """Tell a client that waits for it to send the body (once; nothing for any other client),
    and start the body's deadline: the client sends nothing before this."""
    start_deadline = request.pop(AWAITS_CONTINUE, None)
    if start_deadline is not None:
        await request.writer.write(CONTINUE)
        request.writer.output_size = 0  # the answer itself has not begun (aiohttp's own handler does the same)
        start_deadline()


def awaits_continue(request: web.BaseRequest) -> bool:
    """The client still waits for a 100 Continue: it has not sent the body."""
    return AWAITS_CONTINUE in request
