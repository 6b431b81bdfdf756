"""Bearer-token auth and the access log."""

from __future__ import annotations

import hmac
import time
from dataclasses import replace

from aiohttp import web
from aiohttp.typedefs import Middleware

from agentos.api.errors import Handler, error_response
from agentos.api.keys import RUNTIME
from agentos.clock import wall_ms
from agentos.store.records import DEFAULT_TENANT, AccessRecord
from agentos.tenancy.limits import TenantLimits
from agentos.tenancy.principal import ALL_SCOPES, OPEN_PRINCIPAL, PRINCIPAL, Principal

# Open without the token: the probes, and the API's description with its page (a browser
# cannot send the token to load them; every route they describe still asks for it).
# Matched by route, not by path prefix, so no path reaches another route through an open one.
OPEN_ROUTES = frozenset({"/healthz", "/readyz", "/openapi.json", "/docs", "/docs/{asset}"})


# The principal of `server.api_token` (AGENTOS_API_TOKEN): an admin key of the default tenant.
TOKEN_PRINCIPAL = Principal(DEFAULT_TENANT, "token", ALL_SCOPES)


def auth_middleware(token: str, limits: TenantLimits | None = None) -> Middleware:
    """Sets `request[PRINCIPAL]`: with no `token`, every request is `OPEN_PRINCIPAL`.

    `limits`: the default tenant's limits (`Settings.tenant_limits`), carried by its principals."""
    expected = f"Bearer {token}".encode()
    open_principal = OPEN_PRINCIPAL if limits is None else replace(OPEN_PRINCIPAL, limits=limits)
    token_principal = TOKEN_PRINCIPAL if limits is None else replace(TOKEN_PRINCIPAL, limits=limits)

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not token:
            request[PRINCIPAL] = open_principal
        elif route_of(request) not in OPEN_ROUTES:
            given = request.headers.get("Authorization", "").encode()
            if not hmac.compare_digest(given, expected):
                return error_response(401, "unauthorized", "missing or wrong bearer token")
            request[PRINCIPAL] = token_principal
        return await handler(request)

    return check


def route_of(request: web.Request) -> str | None:
    """The matched route's path pattern (`/docs/{asset}`); None when nothing matched."""
    resource = request.match_info.route.resource
    return None if resource is None else resource.canonical


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
