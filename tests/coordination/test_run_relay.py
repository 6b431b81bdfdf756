"""Run events over the bus: the node running a run publishes each of its events once on
`run:{run_id}`, and another node's follower is fed from that channel (real Redis, a key prefix
of the test's own; the real server and mock provider for the publishing side).

Following a run end to end from another node also needs that node to read the run's journal,
which is per node (SQLite) in this tree: here the two halves are proven apart.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import pytest

from agentos.agents.fanout import Fanout, RunEvent
from agentos.bench.mock.server import MockServer
from agentos.config import CoordinationConfig, settings_from_dict
from agentos.coordination.bus import Bus
from agentos.coordination.relay import RunRelay
from agentos.testing import sse_events
from tests.api.helpers import start_app
from tests.coordination.conftest import REDIS_URL, RedisProxy


async def test_a_runs_events_are_published_once_on_its_channel(tmp_path: Path, mock_factory, prefix: str) -> None:
    from redis.asyncio import Redis

    mock: MockServer = await mock_factory(tokens=5)
    settings = settings_from_dict(
        {
            "data_dir": str(tmp_path / "data"),
            "provider": {"url": mock.url},
            "agents": {"plain": {"tools": []}},
            "coordination": {"redis_url": REDIS_URL, "key_prefix": prefix},
        }
    )
    redis = Redis.from_url(REDIS_URL)
    pubsub = redis.pubsub()
    await pubsub.psubscribe(f"{prefix}run:*")
    server = await start_app(settings)
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
            async with http.post(f"{server.url}/v1/agents/plain/runs", json={"input": "hi"}) as r:
                assert r.status == 202, await r.text()
                run_id = (await r.json())["run_id"]
            heard = await _until_completed(pubsub, f"{prefix}run:{run_id}")
            async with http.get(f"{server.url}/v1/runs/{run_id}/events") as r:
                journal = [(int(str(e.id)), e.name) async for e in sse_events(r) if e.name != "token"]
    finally:
        await server.close()
        await pubsub.aclose()  # type: ignore[no-untyped-call]
        await redis.aclose()
    assert [(seq, name) for seq, name, _ in heard if name != "token"] == journal  # each once, in order
    tokens = [data["delta"] for _, name, data in heard if name == "token"]
    assert len(tokens) == 5


async def _until_completed(pubsub: Any, channel: str) -> list[tuple[int, str, dict[str, Any]]]:
    heard: list[tuple[int, str, dict[str, Any]]] = []
    async with asyncio.timeout(20):
        while not heard or heard[-1][1] != "run.completed":
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
            if message is not None and message["channel"].decode() == channel:
                heard.append(tuple(msgspec.json.decode(message["data"])))  # type: ignore[arg-type]
    return heard


@pytest.fixture
async def two_buses(prefix: str, redis_proxy: RedisProxy) -> AsyncIterator[tuple[Bus, Bus]]:
    """Node A on Redis directly, node B through a proxy the test can take away."""
    a = Bus(CoordinationConfig(redis_url=REDIS_URL, key_prefix=prefix))
    b = Bus(CoordinationConfig(redis_url=redis_proxy.url, key_prefix=prefix))
    for bus in (a, b):
        await bus.start()
        await bus.wait_connected()
    yield a, b
    for bus in (a, b):
        await bus.close()


async def test_another_nodes_follower_is_fed_and_told_after_an_outage(
    two_buses: tuple[Bus, Bus], redis_proxy: RedisProxy
) -> None:
    bus_a, bus_b = two_buses
    here, there = Fanout(), Fanout()
    here.bridge(RunRelay(bus_a))
    there.bridge(RunRelay(bus_b))
    subscription = await there.follow("run_x", local=False)
    assert subscription is not None and await Fanout().follow("run_x", local=False) is None  # no bridge
    here.publish("run_x", RunEvent(3, "tool.call", {"name": "ls"}))
    here.publish("run_x", RunEvent(3, "token", {"delta": "a"}))
    assert await asyncio.wait_for(subscription.get(), 5) == RunEvent(3, "tool.call", {"name": "ls"})
    assert await asyncio.wait_for(subscription.get(), 5) == RunEvent(3, "token", {"delta": "a"})

    await redis_proxy.stop()  # B loses Redis: what is published meanwhile never reaches it
    await bus_b.wait_disconnected()
    here.publish("run_x", RunEvent(4, "run.completed", {}))
    await bus_a.flush()
    await redis_proxy.start()
    await bus_b.wait_connected(10)
    assert await asyncio.wait_for(subscription.get(), 5) is None  # behind: re-read the journal
    there.unsubscribe("run_x", subscription)
