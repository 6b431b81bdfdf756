"""The EventSource path of browser tokens in a real browser (headless Chromium, tests/browser.py):
a page of the API's origin trades its token for the cookie, then follows a turn with
`new EventSource(url, {withCredentials: true})`, which can send neither a header nor a
subprotocol. Chromium, not an HTTP client, decides here whether `HttpOnly`, `SameSite=Strict`
and the cookie's `Path` let the stream through, and keep it from another session.

The page is served by Playwright at the server's origin (`page.route`): Agent OS serves no page
of its own for this, and the example app (examples/browser_tokens) is of another origin.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agentos.mock.server import MockServer
from agentos.testing import start_server
from agentos.testing.tenants import create_tenant_key
from tests.browser import chromium
from tests.conftest import make_settings

pytestmark = pytest.mark.slow
ADMIN_TOKEN = "admin-token-for-eventsource"

FOLLOW = """async ([token, sessionId, turnId, otherId]) => {
  const exchanged = await fetch("/v1/tokens/cookie", {
    method: "POST", headers: {Authorization: `Bearer ${token}`}, credentials: "include"});
  const follow = (sessionId) => new Promise((resolve) => {
    const names = [];
    const source = new EventSource(`/v1/sessions/${sessionId}/turns/${turnId}/events`, {withCredentials: true});
    for (const name of ["turn.started", "turn.completed"]) {
      source.addEventListener(name, () => {
        names.push(name);
        if (name === "turn.completed") { source.close(); resolve(names); }
      });
    }
    source.onerror = () => { source.close(); resolve([...names, "error"]); };
  });
  return {status: exchanged.status, readable: document.cookie, mine: await follow(sessionId),
          other: await follow(otherId)};
}"""


async def test_event_source_follows_a_turn_with_the_cookie(tmp_path: Path, mock: MockServer) -> None:
    server = await start_server(make_settings(tmp_path / "data", mock.url, **{"server.api_token": ADMIN_TOKEN}))
    try:
        key = await create_tenant_key(server.url, ADMIN_TOKEN, scopes=["sessions:read", "sessions:write"])
        async with aiohttp.ClientSession(headers=key.headers) as http:
            session_ids = []
            for _ in range(2):
                async with http.post(f"{server.url}/v1/sessions", json={}) as r:
                    session_ids.append((await r.json())["id"])
            async with http.post(
                f"{server.url}/v1/sessions/{session_ids[0]}/turns",
                json={"input": "hi"},
                headers={"Accept": "application/json"},
            ) as r:
                turn_id = (await r.json())["turn_id"]
            async with http.post(f"{server.url}/v1/tokens", json={"session_ids": [session_ids[0]]}) as r:
                token = (await r.json())["token"]
        async with chromium() as browser:
            context = await browser.new_context()
            page = await context.new_page()
            await page.route(
                f"{server.url}/page",
                lambda route: route.fulfill(body="<!doctype html><title>p</title>", content_type="text/html"),
            )
            await page.goto(f"{server.url}/page")
            seen: dict[str, Any] = await page.evaluate(FOLLOW, [token, session_ids[0], turn_id, session_ids[1]])
            (cookie,) = await context.cookies()
    finally:
        await server.close()
    assert seen["status"] == 204
    assert seen["readable"] == ""  # HttpOnly: no script of the page reads it back
    assert seen["mine"] == ["turn.started", "turn.completed"]
    assert seen["other"] == ["error"]  # not sent there (Path), and the token does not name it
    assert cookie["path"] == f"/v1/sessions/{session_ids[0]}" and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
