"""A run followed from another node: two real `agentos serve` processes on one fresh
PostgreSQL schema and one Redis, the real mock provider streaming slowly.

The follower on node B needs the run's journal rows: where the journal is per node (SQLite),
B does not know the run and the test is skipped, saying so; with the journal on PostgreSQL the
live part comes through the bus (`run:{run_id}`, `agentos.agents.relay`).
"""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from pathlib import Path

import aiohttp
import pytest

from agentos.config import StoreConfig
from agentos.mock.server import MockServer
from agentos.testing import Event, sse_events
from tests.conftest import REDIS_URL
from tests.coordination.cluster import node_env
from tests.coordination.test_turn_streams import serve

pytest.importorskip("asyncpg")
pytestmark = pytest.mark.slow

TOKENS = 60


async def test_a_run_on_node_a_is_followed_on_node_b(
    tmp_path: Path, mock_factory, pg: StoreConfig, prefix: str
) -> None:
    mock: MockServer = await mock_factory(tps=40, tokens=TOKENS)
    env = node_env(pg, REDIS_URL, prefix)
    async with AsyncExitStack() as stack, aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
        a, b = await asyncio.gather(
            stack.enter_async_context(serve(tmp_path / "a", mock.url, env)),
            stack.enter_async_context(serve(tmp_path / "b", mock.url, env)),
        )
        async with http.post(f"{a}/v1/agents", json={"name": "plain", "tools": []}) as r:
            assert r.status == 201, await r.text()
        async with http.post(f"{a}/v1/agents/plain/runs", json={"input": "hi"}) as r:
            assert r.status == 202, await r.text()
            run_id = (await r.json())["run_id"]
        seen: list[Event] = []
        async with http.get(f"{b}/v1/runs/{run_id}/events") as r:
            if r.status == 404:
                pytest.skip("the run journal is per node in this tree: node B does not know node A's run")
            assert r.status == 200, await r.text()
            async for event in sse_events(r):
                seen.append(event)
                if [e.name for e in seen].count("token") == 3:
                    async with http.get(f"{a}/v1/runs/{run_id}") as info:
                        assert (await info.json())["status"] == "running"  # the tokens came live, mid-run
        async with http.get(f"{a}/v1/runs/{run_id}/events") as r:
            journal = [(e.id, e.name) async for e in sse_events(r) if e.name != "token"]
        assert [(e.id, e.name) for e in seen if e.name != "token"] == journal
        assert seen[-1].name == "run.completed"
