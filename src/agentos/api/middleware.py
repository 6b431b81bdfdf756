"""Bearer-token auth and the access log."""

from __future__ import annotations

import hmac
import time

from aiohttp import web
from aiohttp.typedefs import Middleware

from agentos.api.errors import Handler, error_response
from agentos.api.keys import RUNTIME
from agentos.clock import wall_ms
from agentos.store.records import AccessRecord

_OPEN_PATHS = frozenset({"/healthz", "/readyz"})


def auth_middleware(token: str) -> Middleware:
    expected = f"Bearer {token}".encode()

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path not in _OPEN_PATHS:
            given = request.headers.get("Authorization", "").encode()
            if not hmac.compare_digest(given, expected):
                return error_response(401, "unauthorized", "missing or wrong bearer token")
        return await handler(request)

    return check


@web.middleware
async def access_log_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    start = time.perf_counter()
    status = 500
    try:
        response = await handler(request)
        status = response.status
        return response
    finally:
        runtime = request.app.get(RUNTIME)
        if runtime is not None:
            runtime.store.log_access(
                AccessRecord(
                    ts_ms=wall_ms(),
                    method=request.method,
                    path=request.path,
                    status=status,
                    duration_ms=(time.perf_counter() - start) * 1000,
                    remote=request.remote or "",
                )
            )
