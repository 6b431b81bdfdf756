from __future__ import annotations

from collections.abc import Callable
from typing import Any

import aiohttp
from aiohttp import web
from jsonschema import Draft202012Validator

from agentos.api.app import create_app
from agentos.api.openapi import OPENAPI
from agentos.config import Settings
from agentos.services import open_services
from agentos.testing import Event, RunningServer, sse_events

SSE = {"Accept": "text/event-stream"}


async def new_session(http: aiohttp.ClientSession, url: str, **body: Any) -> str:
    async with http.post(f"{url}/v1/sessions", json=body) as r:
        assert r.status == 201, await r.text()
        session_id: str = (await r.json())["id"]
        return session_id


async def turn_events(http: aiohttp.ClientSession, url: str, session_id: str, text: str = "hello") -> list[Event]:
    async with http.post(f"{url}/v1/sessions/{session_id}/turns", json={"input": text}, headers=SSE) as r:
        assert r.status == 200, await r.text()
        assert r.headers["Content-Type"].startswith("text/event-stream")
        return [e async for e in sse_events(r)]


async def start_app(settings: Settings, change: Callable[[web.Application], None] | None = None) -> RunningServer:
    """The real application on loopback, like `agentos.testing.start_server`, after `change`
    has had the app before it starts (a test-only route, a shorter keepalive)."""
    services = await open_services(settings)
    app = create_app(services)
    if change is not None:
        change(app)
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=2)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return RunningServer(f"http://127.0.0.1:{runner.addresses[0][1]}", app, runner, services)


async def expect_error(response: aiohttp.ClientResponse, status: int, code: str | None = None) -> dict[str, Any]:
    """The response is the JSON error body `{"error": {"code", "message"}}` with `status`."""
    assert response.status == status, await response.text()
    assert response.headers["Content-Type"].startswith("application/json")
    body: dict[str, Any] = await response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    if code is not None:
        assert body["error"]["code"] == code
    assert body["error"]["message"]
    return body


def assert_documented(value: Any, schema: str) -> None:
    """`value` is valid against the OpenAPI document's schema `schema` (JSON Schema 2020-12, its
    references resolved in the document), and has no field at the top that the schema does not
    describe."""
    root = {"$ref": f"#/components/schemas/{schema}", "components": OPENAPI["components"]}
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in Draft202012Validator(root).iter_errors(value)]
    assert not errors, (schema, errors, value)
    documented = OPENAPI["components"]["schemas"][schema]
    if isinstance(value, dict) and "properties" in documented:
        assert set(value) <= set(documented["properties"]), (schema, set(value) - set(documented["properties"]))
