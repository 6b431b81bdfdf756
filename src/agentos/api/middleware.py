"""Bearer-key auth and the access log.

Who a request acts for (`request[PRINCIPAL]`), decided once per request, in memory:
- `Authorization: Bearer <server.api_token>`: `TOKEN_PRINCIPAL`, an admin of tenant "default";
- `Authorization: Bearer aos_...`: the key's principal from the tenant registry (one dict
  lookup and one HMAC; `agentos.tenancy.registry`);
- `Authorization: Bearer <JWT>`: chosen by its `iss`; an end user's token from a tenant's
  identity provider (`[identity]`, `agentos.identity`) is verified against the provider's keys
  (a token verified before: one dict lookup);
- no token configured, no usable key in the registry, no identity provider, and a loopback bind: every request is
  `OPEN_PRINCIPAL` (a single user on their own machine; the README's commands need no key);
- `Authorization: Bearer <JWT>` whose `iss` is the server's own: a browser token
  (`agentos.api.browser_tokens`: its signature, its parent key, the routes and resources it may
  use); a browser client without headers presents it as a WebSocket subprotocol or a cookie;
- anything else: 401 with `WWW-Authenticate: Bearer`. A key is read only from the header,
  never from the URL (URLs end up in logs, histories and Referer headers).
"""

from __future__ import annotations

import hmac
import ipaddress
import time
from dataclasses import replace

from aiohttp import web
from aiohttp.typedefs import Middleware

from agentos.api.browser_tokens import BrowserGate
from agentos.api.errors import Handler, error_response
from agentos.api.keys import RUNTIME, TRACE_ID
from agentos.clock import wall_ms
from agentos.errors import InvalidInput
from agentos.identity import UserTokens, looks_like_jwt
from agentos.store.records import DEFAULT_TENANT, AccessRecord
from agentos.tenancy.browser_tokens import is_browser_token
from agentos.tenancy.principal import ALL_SCOPES, OPEN_PRINCIPAL, PRINCIPAL, Principal
from agentos.tenancy.registry import Refused, TenantRegistry

# Open without a key: the probes, the API's description with its page, and the console's
# static files (a browser cannot send a key to load them; every route they call still asks for it).
# Matched by route, not by path prefix, so no path reaches another route through an open one.
# A trigger's deliveries are signed instead (`agentos.triggers.signatures`; senders have no key).
OPEN_ROUTES = frozenset(
    {
        "/healthz",
        "/readyz",
        "/openapi.json",
        "/docs",
        "/docs/{asset}",
        "/console",
        "/console/{asset}",
        "/v1/triggers/{trigger_id}/events",
        "/.well-known/jwks.json",
    }
)

# The principal of `server.api_token` (AGENTOS_API_TOKEN): an admin key of the default tenant.
TOKEN_PRINCIPAL = Principal(DEFAULT_TENANT, "token", ALL_SCOPES)

# The key_id of a well-formed key that was refused, for the access log ("" when malformed).
REFUSED_KEY_ID: web.RequestKey[str] = web.RequestKey("refused_key_id", str)

_MISSING = {"WWW-Authenticate": 'Bearer realm="agentos"'}
_INVALID = {"WWW-Authenticate": 'Bearer realm="agentos", error="invalid_token"'}


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def auth_middleware(
    token: str,
    registry: TenantRegistry,
    *,
    loopback: bool,
    browser: BrowserGate | None = None,
    users: UserTokens | None = None,
) -> Middleware:
    """Sets `request[PRINCIPAL]` (see the module docstring) or answers 401."""
    token_bytes = token.encode()
    defaults = _DefaultPrincipals(registry)

    def open_server() -> bool:
        no_users = users is None or not users.has_issuers()  # a tenant's provider closes it too
        return not token and loopback and no_users and not registry.has_usable_keys()

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        route = route_of(request)
        if route in OPEN_ROUTES:
            return await handler(request)
        authorization = request.headers.getall("Authorization", ())
        if len(authorization) > 1:  # a singleton field (RFC 9110): which one counts is anyone's guess
            return error_response(400, "bad_request", f"Authorization: send it once, got {len(authorization)}")
        scheme, _, given = (authorization[0] if authorization else "").partition(" ")
        given = given.strip() if scheme.lower() == "bearer" else ""
        if not given and browser is not None:
            given = browser.credential(request)
        if not given:
            if open_server():
                request[PRINCIPAL] = defaults.open()
                return await handler(request)
            return error_response(401, "unauthorized", "missing bearer key (Authorization: Bearer ...)", _MISSING)
        # surrogateescape: aiohttp keeps a header's undecodable bytes as surrogates; compare them as sent
        if token and hmac.compare_digest(given.encode("utf-8", "surrogateescape"), token_bytes):
            request[PRINCIPAL] = defaults.token()
            return await handler(request)
        if browser is not None and is_browser_token(given):  # dispatch on `iss`: the server's own
            found = browser.authenticate(request, route, given)
        elif looks_like_jwt(given):  # another JWT: its `iss` chooses the identity provider (`_token_principal`)
            found = await _token_principal(given, users)
        else:
            found = registry.authenticate(given)
        if isinstance(found, Refused):
            if open_server():  # today's open loopback server ignores whatever header comes
                request[PRINCIPAL] = defaults.open()
                return await handler(request)
            request[REFUSED_KEY_ID] = found.key_id
            return error_response(401, "unauthorized", f"invalid bearer key: {found.reason}", _INVALID)
        request[PRINCIPAL] = found
        return await handler(request)

    return check


async def _token_principal(token: str, users: UserTokens | None) -> Principal | Refused:
    """A JWT's principal: an end user's token from a tenant's identity provider (`users`
    checks the `iss` first; a verified token is a dict lookup). Another kind of JWT (the
    server's own browser tokens) is told apart by its `iss` here, before `users`
    (`agentos.identity.unverified_issuer`)."""
    if users is not None:
        return await users.authenticate(token)
    return Refused("", "no identity provider is configured")


class _DefaultPrincipals:
    """`OPEN_PRINCIPAL` and `TOKEN_PRINCIPAL` with the default tenant's effective limits (the
    config's `[tenant_limits]` under its row's overrides), rebuilt only when that row changes:
    per request, one dict lookup and an identity check."""

    __slots__ = ("_registry", "_tenant", "_open", "_token")

    def __init__(self, registry: TenantRegistry) -> None:
        self._registry = registry
        self._tenant: object = None
        self._open = OPEN_PRINCIPAL
        self._token = TOKEN_PRINCIPAL

    def open(self) -> Principal:
        self._refresh()
        return self._open

    def token(self) -> Principal:
        self._refresh()
        return self._token

    def _refresh(self) -> None:
        tenant = self._registry.tenant(DEFAULT_TENANT)  # always exists (the registry makes it)
        if tenant is not self._tenant:
            try:
                limits = self._registry.limits_of(DEFAULT_TENANT)
            except InvalidInput:  # a row written by a newer version: the defaults, as for keys
                limits = self._registry.defaults
            self._open = replace(OPEN_PRINCIPAL, limits=limits)
            self._token = replace(TOKEN_PRINCIPAL, limits=limits)
            self._tenant = tenant


def route_of(request: web.Request) -> str | None:
    """The matched route's path pattern (`/docs/{asset}`); None when nothing matched."""
    resource = request.match_info.route.resource
    return None if resource is None else resource.canonical


@web.middleware
async def access_log_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """One row per request: who (tenant, key_id, never the key, and the end user's subject), what,
    how it ended."""
    start = time.perf_counter()
    status = 500
    try:
        response = await handler(request)
        status = response.status
        return response
    finally:
        runtime = request.app.get(RUNTIME)
        if runtime is not None:
            who = request.get(PRINCIPAL)
            runtime.store.log_access(
                AccessRecord(
                    ts_ms=wall_ms(),
                    method=request.method,
                    path=_loggable(request.path),
                    status=status,
                    duration_ms=(time.perf_counter() - start) * 1000,
                    remote=request.remote or "",
                    tenant_id=who.tenant_id if who is not None else "",
                    key_id=(who.key_id or "") if who is not None else request.get(REFUSED_KEY_ID, ""),
                    trace_id=request.get(TRACE_ID, ""),
                    subject=(who.subject or "") if who is not None else "",
                )
            )


def _loggable(path: str) -> str:
    """The path as a store takes it: a `%00` (refused with a 400, still logged) stays `%00`."""
    return path.replace("\x00", "%00") if "\x00" in path else path
