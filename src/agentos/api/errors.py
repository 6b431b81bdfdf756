"""The single mapping from exceptions to HTTP answers: `{"error": {"code", "message"}}`.

A `RequestError` is the client's fault and says so; a `StoreUnavailable` is nobody's fault
(the database is away) and answers 503 `store_unavailable` with `Retry-After`; anything else
is ours: the client gets `internal_error` and an `error_id` to quote, the log gets the
traceback under the same id.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from aiohttp import web

from agentos.errors import RequestError, StoreUnavailable, new_error_id

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


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None, **extra: str
) -> web.Response:
    body = msgspec.json.encode({"error": {"code": code, "message": message, **extra}})
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
        return await handler(request)
    except RequestError as exc:
        headers = None if exc.retry_after_s is None else {"Retry-After": str(exc.retry_after_s)}
        return error_response(exc.status, exc.code, exc.message, headers)
    except StoreUnavailable as exc:
        log.warning("store unavailable on %s %s: %s", request.method, request.path, exc)
        message = "the store cannot be reached; retry later"
        return error_response(exc.status, exc.code, message, {"Retry-After": str(exc.retry_after_s)})
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = _AIOHTTP_CODES.get(exc.status, "http_error")
        headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
        return error_response(exc.status, code, exc.reason, headers)
    except Exception:
        error_id = log_internal_error("unhandled error on %s %s", request.method, request.path)
        return error_response(500, "internal_error", INTERNAL_MESSAGE, error_id=error_id)
