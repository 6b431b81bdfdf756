"""Steering costs no model call of its own: the steered message joins the running agent's next
model call, which it made anyway. The mock's request counter is the proof: every request it
served is one of the run's journaled model calls, and the steering turn made none."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp

from agentos.config import settings_from_dict
from agentos.mock.server import MockServer
from agentos.testing import sse_events, start_server
from tests.api.helpers import SSE, new_session

OPS = {"tools": ["run_command"], "command": {"timeout_s": 10}}


async def test_a_steer_adds_no_model_call(tmp_path: Path, mock_factory: Any, http: aiohttp.ClientSession) -> None:
    # `light`: two run_command calls, then the answer; the steer comes during the first model call.
    mock: MockServer = await mock_factory(scenario="light", ttft_ms=300, tps=1000, tokens=3)
    settings = settings_from_dict(
        {"data_dir": str(tmp_path / "data"), "provider": {"url": mock.url}, "agents": {"ops": OPS}}
    )
    server = await start_server(settings)
    try:
        sid = await new_session(http, server.url, agent="ops")
        url = f"{server.url}/v1/sessions/{sid}/turns"

        async def turn(body: dict[str, str]) -> list[Any]:
            async with http.post(url, json=body, headers=SSE) as r:
                return [e async for e in sse_events(r)]

        first = asyncio.create_task(turn({"input": "build it"}))
        await mock.stats.wait_for(lambda s: s.requests == 1, what="the agent's first model call")
        steering = await turn({"input": "and use blue", "on_busy": "steer"})
        events = await first
        run_id = events[-1].data["run_id"]
        async with http.get(f"{server.url}/v1/runs/{run_id}/events", headers=SSE) as r:
            run_events = [e async for e in sse_events(r)]
    finally:
        await server.close()
    assert [e.name for e in steering] == ["turn.queued", "turn.completed"]
    assert steering[-1].data["steered_into"] == events[0].data["turn_id"]
    assert [e.name for e in events].count("turn.steered") == 1 and events[-1].name == "turn.completed"
    model_calls = [e for e in run_events if e.name == "model.started"]
    assert mock.stats.requests == len(model_calls)  # every call the provider saw is one of the run's
    # The script starts over after a user message: 1 call before the steer, then its 3 (two tools,
    # the answer). Run as a turn of its own the message would have cost a run of 3 more.
    assert mock.stats.requests == 4
