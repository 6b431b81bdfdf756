"""The single mapping from exceptions to HTTP answers: `{"error": {"code", "message"}}`."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import msgspec
from aiohttp import web

from agentos.errors import AdmissionRejected, RequestError

log = logging.getLogger("agentos.api")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# aiohttp raises its own HTTP exceptions for routing and body limits; give them our codes.
_AIOHTTP_CODES = {
    400: "bad_request",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    415: "unsupported_media_type",
}


def error_response(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> web.Response:
    body = msgspec.json.encode({"error": {"code": code, "message": message}})
    return web.Response(status=status, body=body, content_type="application/json", headers=headers)


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except AdmissionRejected as exc:
        return error_response(429, exc.code, exc.message, {"Retry-After": str(exc.retry_after_s)})
    except RequestError as exc:
        return error_response(exc.status, exc.code, exc.message)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = _AIOHTTP_CODES.get(exc.status, "http_error")
        headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
        return error_response(exc.status, code, exc.reason, headers)
    except Exception:
        log.exception("unhandled error on %s %s", request.method, request.path)
        return error_response(500, "internal_error", "internal server error")
