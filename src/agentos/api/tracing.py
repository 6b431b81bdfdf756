"""One trace per HTTP request that starts work (`[telemetry]`, docs/observability.md).

A request that changes something (any method but GET, HEAD and OPTIONS) or opens a WebSocket
gets a server span named by its route template (`POST /v1/sessions/{session_id}/turns`); what
the request starts (a turn, a run, a model call) nests under it. Reads and polls are not traced:
they start no work and would drown the traces that matter.

The caller's W3C `traceparent`/`tracestate` continue its trace when its key may set them
(`telemetry.accept_traceparent`): every authenticated caller, admins only, or none. A malformed
one is ignored, never an error; a tracestate is bounded and checked as the W3C spec says
(`agentos.telemetry.tracestate`) and used only with a valid traceparent. Placed after
authentication, which decides that.
"""

from __future__ import annotations

from aiohttp import web
from aiohttp.typedefs import Middleware

from agentos.api.errors import Handler
from agentos.api.keys import TRACE_ID
from agentos.config.telemetry import TelemetryConfig
from agentos.telemetry import Tracing, valid_traceparent
from agentos.telemetry.tracestate import parse_tracestate
from agentos.tenancy.principal import PRINCIPAL, Principal

_READS = frozenset({"GET", "HEAD", "OPTIONS"})


def tracing_middleware(tracing: Tracing, config: TelemetryConfig) -> Middleware:
    def caller_context(request: web.Request, who: Principal | None) -> tuple[str, str]:
        """The caller's (traceparent, tracestate) to continue, ("", "") for none."""
        if config.accept_traceparent == "none" or who is None:
            return "", ""
        if config.accept_traceparent == "admin" and not who.is_admin:
            return "", ""
        return w3c_context(request)

    @web.middleware
    async def traced(request: web.Request, handler: Handler) -> web.StreamResponse:
        websocket = request.headers.get("Upgrade", "").lower() == "websocket"
        if request.method in _READS and not websocket:
            return await handler(request)
        who = request.get(PRINCIPAL)
        route = request.match_info.route.resource
        template = route.canonical if route is not None else request.path
        # Few attributes, each worth its cost (the SDK checks every one): the path's ids are in
        # the spans below (a session's, a run's), the route names the operation.
        attributes = {"http.request.method": request.method, "http.route": template}
        if who is not None:
            attributes["agentos.tenant.id"] = who.tenant_id
            if who.key_id:
                attributes["agentos.key.id"] = who.key_id
        name = f"{request.method} {template}"
        parent, state = caller_context(request, who)
        with tracing.span(name, attributes, kind="server", parent=parent, tracestate=state) as span:
            request[TRACE_ID] = span.trace_id
            response = await handler(request)
            span.set_attribute("http.response.status_code", response.status)
            return response

    return traced


def w3c_context(request: web.Request) -> tuple[str, str]:
    """The request's W3C (traceparent, tracestate): ("", "") without a valid traceparent (a
    tracestate alone means nothing), the tracestate "" when absent or invalid."""
    value = request.headers.get("traceparent", "")
    if not valid_traceparent(value):
        return "", ""
    return value.strip(), parse_tracestate(request.headers.getall("tracestate", ()))
