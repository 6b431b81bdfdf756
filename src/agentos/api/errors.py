"""The single mapping from exceptions to HTTP answers: `{"error": {"code", "message"}}`.

A `RequestError` is the client's fault and says so; a `StoreUnavailable` is nobody's fault
(the database is away) and answers 503 `store_unavailable` with `Retry-After`; anything else
is ours: the client gets `internal_error` and an `error_id` to quote, the log gets the
traceback under the same id.

Once a response has started (an event stream sent its status line and headers), no exception
may become an HTTP answer: aiohttp would write a second status line into the stream. A handler
that starts one registers it under `STARTED`; a failure that still reaches the middleware
ends that stream with its last event instead (`agentos.api.sse`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import msgspec
from aiohttp import web

from agentos.errors import NotFound, RequestError, StoreUnavailable, new_error_id

log = logging.getLogger("agentos.api")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

INTERNAL_MESSAGE = "internal server error"

# aiohttp raises its own HTTP exceptions for routing and body limits; give them our codes.
_AIOHTTP_CODES = {
    400: "bad_request",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    415: "unsupported_media_type",
}


class StartedResponse(Protocol):
    """A response whose status line is on the wire (`STARTED`)."""

    async def end_with_failure(self, exc: Exception) -> web.StreamResponse:
        """Tell the client as the stream can (its last event), end it, and return it."""


STARTED: web.RequestKey[StartedResponse] = web.RequestKey("started_response")


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None, **extra: str
) -> web.Response:
    error = {"code": code, "message": message, **extra}
    try:
        body = msgspec.json.encode({"error": error})
    except UnicodeEncodeError:  # a message that quotes a header's undecodable bytes (lone surrogates)
        safe = {k: v.encode("utf-8", "backslashreplace").decode() for k, v in error.items()}
        body = msgspec.json.encode({"error": safe})
    return web.Response(status=status, body=body, content_type="application/json", headers=headers)


def log_internal_error(what: str, *args: Any) -> str:
    """Log the exception being handled, with its traceback, under a new error id; return the id.

    Call it from an `except` block: `what % args` says where it happened.
    """
    error_id = new_error_id()
    log.exception("%s (error_id=%s)", what % args, error_id)
    return error_id


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        _refuse_nul(request)
        return await handler(request)
    except Exception as exc:
        started: StartedResponse | None = request.get(STARTED)
        if started is not None:
            return await started.end_with_failure(exc)
        return _answer(request, exc)


def _refuse_nul(request: web.Request) -> None:
    """NUL (`%00`) is in no id or name, and PostgreSQL takes it in no text (the query failed: a
    500): a path with it names nothing, for every route, before any handler (one substring
    search). Query parameters are checked where they are read (`agentos.api.body.query_text`).

    Raises:
        NotFound: NUL in the path.
    """
    if "%00" in request.rel_url.raw_path:
        raise NotFound("no resource has NUL (%00) in its path")


def _answer(request: web.Request, exc: Exception) -> web.StreamResponse:
    """The JSON answer of `exc`; call it while `exc` is being handled (its traceback is logged)."""
    if isinstance(exc, RequestError):
        headers = None if exc.retry_after_s is None else {"Retry-After": str(exc.retry_after_s)}
        extra = {} if exc.param is None else {"param": exc.param}
        if exc.turn_id is not None:
            extra["turn_id"] = exc.turn_id
        return error_response(exc.status, exc.code, exc.message, headers, **extra)
    if isinstance(exc, StoreUnavailable):
        log.warning("store unavailable on %s %s: %s", request.method, request.path, exc)
        message = "the store cannot be reached; retry later"
        return error_response(exc.status, exc.code, message, {"Retry-After": str(exc.retry_after_s)})
    if isinstance(exc, web.HTTPException):
        if exc.status < 400:
            raise exc  # a redirect: aiohttp answers it
        code = _AIOHTTP_CODES.get(exc.status, "http_error")
        headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
        return error_response(exc.status, code, exc.reason, headers)
    error_id = log_internal_error("unhandled error on %s %s", request.method, request.path)
    return error_response(500, "internal_error", INTERNAL_MESSAGE, error_id=error_id)
