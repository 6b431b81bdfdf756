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
from agentos.agents.relay import RunRelay
from agentos.config import CoordinationConfig, settings_from_dict
from agentos.coordination.bus import Bus
from agentos.mock.server import MockServer
from agentos.testing import eventually, sse_events
from tests.api.helpers import start_app
from tests.conftest import REDIS_URL
from tests.coordination.conftest import RedisProxy


async def test_a_followed_runs_events_are_published_once_on_its_channel(
    tmp_path: Path, mock_factory, prefix: str
) -> None:
    from redis.asyncio import Redis

    mock: MockServer = await mock_factory(tokens=30, tps=100)
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
    await pubsub.psubscribe(f"{prefix}run:*", f"{prefix}marker")
    server = await start_app(settings)
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
            unfollowed = await _start_run(http, server.url)
            followed = await _start_run(http, server.url)
            await redis.publish(f"{prefix}run-follow", followed)  # what another node's follower says
            heard = await _until_completed(pubsub, f"{prefix}run:{followed}")
            async with http.get(f"{server.url}/v1/runs/{followed}/events") as r:
                journal = [(int(str(e.id)), e.name) async for e in sse_events(r) if e.name != "token"]
            async with http.get(f"{server.url}/v1/runs/{unfollowed}/events") as r:
                assert [e.name async for e in sse_events(r)][-1] == "run.completed"
            bus = server.services.bus
            assert bus is not None
            bus.publish("marker", b"after both runs")  # the bus keeps order: anything of theirs came first
            rest = await _until_channel(pubsub, f"{prefix}marker")
    finally:
        await server.close()
        await pubsub.aclose()
        await redis.aclose()
    published = [(seq, name) for seq, name, _ in heard if name != "token"]
    assert published and published == journal[len(journal) - len(published) :]  # each once, in order, to the end
    assert [name for _, name, _ in heard].count("token") > 0
    assert f"{prefix}run:{unfollowed}" not in rest  # nobody followed it: nothing published


async def _start_run(http: aiohttp.ClientSession, url: str) -> str:
    async with http.post(f"{url}/v1/agents/plain/runs", json={"input": "hi"}) as r:
        assert r.status == 202, await r.text()
        return str((await r.json())["run_id"])


async def _until_completed(pubsub: Any, channel: str) -> list[tuple[int, str, dict[str, Any]]]:
    heard: list[tuple[int, str, dict[str, Any]]] = []
    async with asyncio.timeout(20):
        while not heard or heard[-1][1] != "run.completed":
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
            if message is not None and message["channel"].decode() == channel:
                heard.append(tuple(msgspec.json.decode(message["data"])))
    return heard


async def _until_channel(pubsub: Any, channel: str) -> list[str]:
    """The channels of the messages up to the first on `channel`."""
    seen: list[str] = []
    async with asyncio.timeout(20):
        while not seen or seen[-1] != channel:
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
            if message is not None:
                seen.append(message["channel"].decode())
    return seen


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
    relay_a, relay_b = RunRelay(bus_a), RunRelay(bus_b)
    for fanout, relay in ((here, relay_a), (there, relay_b)):
        await relay.start()
        fanout.bridge(relay)
    subscription = await there.follow("run_x", local=False)
    await eventually(lambda: relay_a.followed("run_x"), what="node A to hear that B follows the run")
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
