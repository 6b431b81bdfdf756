"""Draining (defect 6): once `runtime.drain` has begun, every way in to new work is refused,
a new run and a WebSocket turn as much as an HTTP turn, while the turn it holds finishes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp

from agentos.config import settings_from_dict
from agentos.mock.server import MockServer
from agentos.testing import sse_events, start_server
from tests.api.helpers import SSE, expect_error, new_session


async def test_drain_refuses_new_runs_and_turns_of_every_kind(
    tmp_path: Path, mock_factory, http: aiohttp.ClientSession
) -> None:
    mock: MockServer = await mock_factory(ttft_ms=5, tps=50, tokens=2000)  # a turn that holds the drain
    settings = settings_from_dict(
        {"data_dir": str(tmp_path / "data"), "provider": {"url": mock.url}, "agents": {"ops": {}}}
    )
    server = await start_server(settings)
    try:
        slow, other = await new_session(http, server.url), await new_session(http, server.url)
        async with (
            http.ws_connect(f"{server.url}/v1/sessions/{other}/ws") as ws,
            http.post(f"{server.url}/v1/sessions/{slow}/turns", json={"input": "x"}, headers=SSE) as held,
        ):
            events = sse_events(held)
            assert [(await anext(events)).name, (await anext(events)).name] == ["turn.started", "token"]
            drain = asyncio.create_task(server.runtime.drain(30.0))
            await asyncio.sleep(0)  # let the drain begin: it stops admitting before its first wait
            assert not server.runtime.accepting and not drain.done()

            async with http.post(f"{server.url}/v1/agents/ops/runs", json={"input": "x"}) as r:
                await expect_error(r, 503, "shutting_down")
                assert r.headers["Retry-After"] == "1"
            async with http.post(f"{server.url}/v1/sessions/{other}/turns", json={"input": "x"}) as r:
                await expect_error(r, 503, "shutting_down")
                assert r.headers["Retry-After"] == "1"
            await ws.send_json({"type": "turn", "input": "x"})
            frame = await ws.receive_json(timeout=5)
            assert frame["type"] == "error" and frame["error"]["code"] == "shutting_down", frame
            async with http.get(f"{server.url}/v1/sessions/{other}") as r:
                assert (await r.json())["active_turn"] is None  # refused, not started

            async with http.delete(f"{server.url}/v1/sessions/{slow}/turn") as r:  # let the drain end
                assert r.status == 200
            rest = [e async for e in events]
            assert rest[-1].name == "turn.cancelled"
            await asyncio.wait_for(drain, 10)
    finally:
        await server.close()
