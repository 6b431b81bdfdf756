"""The aiohttp application: middlewares and routes around the built services."""

from __future__ import annotations

from aiohttp import web
from aiohttp.typedefs import Middleware

from agentos.agents import RUN_SERVICE, add_routes
from agentos.api import ops, sessions, turns, websocket
from agentos.api.errors import error_middleware
from agentos.api.keys import MAX_BODY_BYTES, METRICS, RUNTIME, SETTINGS
from agentos.api.middleware import access_log_middleware, auth_middleware
from agentos.services import Services


def create_app(services: Services) -> web.Application:
    """The HTTP application around built services (`agentos.services.open_services`); closing
    the services is their owner's job, not the app's."""
    settings = services.settings
    middlewares: list[Middleware] = []
    if settings.server.access_log and settings.store.enabled:
        middlewares.append(access_log_middleware)
    middlewares.append(error_middleware)
    if settings.server.api_token:
        middlewares.append(auth_middleware(settings.server.api_token))
    # aiohttp's own body cap sits a little above ours so that ours answers with a JSON 413.
    app = web.Application(middlewares=middlewares, client_max_size=settings.server.max_body_bytes + 1)
    app[MAX_BODY_BYTES] = settings.server.max_body_bytes
    app[SETTINGS] = settings
    app[METRICS] = services.metrics
    app[RUNTIME] = services.runtime
    app[RUN_SERVICE] = services.runs
    for table in (sessions.routes, turns.routes, websocket.routes, ops.routes):
        app.router.add_routes(table)
    add_routes(app, RUN_SERVICE)
    return app
