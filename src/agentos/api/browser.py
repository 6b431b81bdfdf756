"""Browser rules: what a web page could make a user's browser send us is refused before auth.

Loopback is no trust boundary against the browser: any page the user opens can send requests
to `127.0.0.1:8080`, and the open loopback server (no key, `agentos.api.middleware`) would act
on them. Three rules, docs/security.md "Browser rules":

1. **Host** (DNS rebinding: a page on `evil.example` whose name now resolves to 127.0.0.1 is
   same-origin with itself, and its requests say `Host: evil.example`): the name must be
   `localhost`, `127.0.0.1`, `::1`, the bind host or in `server.allowed_hosts`; a server bound
   beyond loopback with no `allowed_hosts` takes any (its keys guard it). Else 421
   `host_not_allowed`. A request whose target is absolute (`GET http://evil.example/v1/x`)
   names its host there, and its `Host` header is ignored (RFC 9112 3.2.2): the target's
   authority is the name checked, and the one rule 2 compares an Origin with. Such a target
   must be an `http` or `https` URL without userinfo (RFC 9110 4.2), else 400 `bad_request`.
2. **Origin** (cross-site requests, simple `text/plain` POSTs and WebSockets included): an
   `Origin` must be this server's own (`http(s)://` + the request's `Host`) or in
   `server.allowed_origins`; `Origin: null` is refused. Without `Origin`,
   `Sec-Fetch-Site: cross-site` or `same-site` is refused. No `Origin` and no
   `Sec-Fetch-Site` (curl, SDKs, servers) passes. Else 403 `cross_origin`.
3. **Content-Type**: a JSON body must say so (`agentos.api.body.read_body`, 415).

Exempt: the probes, the API's description and the static pages (/docs, /console) from rule 2
(reading them cross-site gives a page nothing), and the signed webhook deliveries from rules 1
and 2 (other servers send them, and a signature is what they rest on). Per request: a few header reads and set lookups.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web
from aiohttp.typedefs import Middleware
from yarl import URL

from agentos.api.errors import Handler, error_response
from agentos.api.middleware import is_loopback, route_of
from agentos.config.server import ANY_HOST, ServerConfig, normal_host, normal_origin

DELIVERIES = "/v1/triggers/{trigger_id}/events"
_STATIC = ("/docs", "/docs/{asset}", "/console", "/console/{asset}")
ORIGIN_EXEMPT = frozenset({"/healthz", "/readyz", "/openapi.json", *_STATIC, DELIVERIES})
HOST_EXEMPT = frozenset({"/healthz", "/readyz", DELIVERIES})  # probes: a balancer may name the node's IP
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
_OWN_SCHEMES = ("http", "https")  # TLS may end at a proxy: the scheme we see is not the page's
_FOREIGN_FETCH = frozenset({"cross-site", "same-site"})


@dataclass(frozen=True, slots=True)
class BrowserRules:
    """`hosts`: the names a `Host` may have (None: any); `origins`: the allowed foreign origins."""

    hosts: frozenset[str] | None
    origins: frozenset[str]

    @classmethod
    def from_settings(cls, server: ServerConfig) -> BrowserRules:
        origins = frozenset(o for o in map(normal_origin, server.allowed_origins) if o is not None)
        if ANY_HOST in server.allowed_hosts or (not server.allowed_hosts and not is_loopback(server.host)):
            return cls(None, origins)
        named = (*LOOPBACK_NAMES, server.host, *server.allowed_hosts)
        return cls(frozenset(h for h in map(normal_host, named) if h is not None), origins)

    def host_refusal(self, host: str | None) -> str | None:
        """Why `host` (`named_host`) is refused; None when it is allowed or absent (HTTP/1.0)."""
        if self.hosts is None or host is None or host_name(host) in self.hosts:
            return None
        allowed = ", ".join(sorted(self.hosts))
        return f"host {host[:100]!r} is not a name of this server ({allowed}; set server.allowed_hosts)"

    def origin_refusal(self, origin: str | None, fetch_site: str | None, host: str | None) -> str | None:
        """Why a request with these headers is refused as cross-origin; None when it is not."""
        if origin is None:
            if fetch_site is not None and fetch_site.lower() in _FOREIGN_FETCH:
                return f"Sec-Fetch-Site: {fetch_site[:20]}: a page of another site sent this request"
            return None
        if origin in self.origins or (host is not None and _is_own(origin, host.lower())):
            return None
        return (
            f"Origin {origin[:100]!r} is not this server's own origin nor in server.allowed_origins:"
            " a web page may not call this API"
        )


def _is_own(origin: str, host: str) -> bool:
    scheme, sep, authority = origin.partition("://")
    return bool(sep) and scheme in _OWN_SCHEMES and authority == host


def absolute_target(request: web.BaseRequest) -> URL | None:
    """The request target when it is in absolute form (`GET http://h:1/p`), else None.

    aiohttp routes such a request by the target's path and keeps the target as sent in
    `raw_path` (its parser took it as a URL with a host already, or answered 400)."""
    raw = request.raw_path
    return None if raw.startswith("/") or raw == "*" else URL(raw, encoded=True)


def named_host(request: web.BaseRequest, target: URL | None) -> str | None:
    """The host a request names: an absolute-form target's authority, whose `Host` is then
    ignored (RFC 9112 3.2.2); else its `Host` (None: an HTTP/1.0 request without one)."""
    return request.headers.get("Host") if target is None else target.host_port_subcomponent


def target_refusal(target: URL | None) -> str | None:
    """Why an absolute-form target is not one this server answers: not http(s), or with userinfo
    (RFC 9110 4.2.4: a recipient treats it as an error). None for any other target."""
    if target is None:
        return None
    if target.scheme not in _OWN_SCHEMES:
        return f"the request target must be a path or an http(s) URL, got {str(target)[:100]!r}"
    if target.raw_user is not None:
        return "the request target must not hold userinfo (user@host)"
    return None


def host_name(host: str) -> str:
    """The name of a `Host` header: lower case, without its port or an IPv6 address's brackets."""
    value = host.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    name, sep, _ = value.rpartition(":")
    return (name if sep else value).removesuffix(".")


def browser_middleware(rules: BrowserRules) -> Middleware:
    """Answers 421 `host_not_allowed` or 403 `cross_origin` (module docstring), before auth."""

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        route = route_of(request)
        headers = request.headers
        target = absolute_target(request)
        host = named_host(request, target)
        if route not in HOST_EXEMPT:
            if (why := target_refusal(target)) is not None:
                return error_response(400, "bad_request", why)
            if (why := rules.host_refusal(host)) is not None:
                return error_response(421, "host_not_allowed", why)
        if route not in ORIGIN_EXEMPT:
            why = rules.origin_refusal(headers.get("Origin"), headers.get("Sec-Fetch-Site"), host)
            if why is not None:
                return error_response(403, "cross_origin", why)
        return await handler(request)

    return check
