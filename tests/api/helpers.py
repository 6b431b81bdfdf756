from __future__ import annotations

from typing import Any

import aiohttp

from agentos.testing import Event, sse_events

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
