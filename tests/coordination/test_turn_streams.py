"""A turn followed from another node: two real `agentos serve` processes on one fresh
PostgreSQL schema and one Redis (a key prefix of the test's own), the real mock provider at a
slow token rate so the turn is mid-way while node B follows it.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import aiohttp
import pytest

from agentos.config import StoreConfig
from agentos.mock.server import MockServer
from agentos.testing import Event, sse_events, start_server
from tests.api.helpers import new_session
from tests.api.test_turn_follow import follow, post_turn
from tests.conftest import REDIS_URL, child_env, make_settings
from tests.coordination.cluster import node_env
from tests.coordination.conftest import RedisProxy

pytest.importorskip("asyncpg")
pytestmark = pytest.mark.slow

TOKENS = 60


@asynccontextmanager
async def serve(data_dir: Path, provider_url: str, env: dict[str, str]) -> AsyncIterator[str]:
    """One `agentos serve` process; yields its URL. Killed (by its pid) at the end."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agentos",
        "serve",
        "--port",
        "0",
        "--data-dir",
        str(data_dir),
        "--provider-url",
        provider_url,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=child_env(**env),
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
        if not line.startswith("agentos listening on "):
            raise AssertionError(line + (await proc.stderr.read()).decode()[-2000:])
        yield line.split()[-1]
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_a_turn_on_node_a_is_followed_and_resumed_on_node_b(
    tmp_path: Path, mock_factory, pg: StoreConfig, prefix: str
) -> None:
    mock: MockServer = await mock_factory(tps=40, tokens=TOKENS)  # 1.5 s per turn
    env = node_env(pg, REDIS_URL, prefix)
    async with AsyncExitStack() as stack, aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
        a, b = await asyncio.gather(
            stack.enter_async_context(serve(tmp_path / "a", mock.url, env)),
            stack.enter_async_context(serve(tmp_path / "b", mock.url, env)),
        )
        sid = await new_session(http, a)
        posted = await post_turn(http, a, sid)
        turn_id = posted.turn_id
        assert posted.task is not None

        first: list[Event] = []
        async with follow(http, b, sid, turn_id) as events:
            async for event in events:
                first.append(event)
                if len(first) == 6:
                    break  # B's client goes away mid-turn
        assert first[0] == Event("turn.started", f"{turn_id}:1", {"turn_id": turn_id, "session_id": sid})
        assert [e.name for e in first[1:]] == ["token"] * 5
        assert not posted.task.done()  # the tokens came live, through Redis, while A still streamed

        async with follow(http, b, sid, turn_id, {"Last-Event-ID": f"{turn_id}:1"}) as events:
            resumed = [e async for e in events]
        await posted.task
        assert "turn.started" not in [e.name for e in resumed]
        assert resumed[-1].name == "turn.completed" and resumed[-1].id == f"{turn_id}:{TOKENS + 2}"
        assert resumed[-1].data == posted.events[-1].data
        assert 0 < len(resumed) - 1 < TOKENS  # the tokens from the reconnect on

        # Once it ended, B replays what PostgreSQL stored, from any seq.
        async with follow(http, b, sid, turn_id) as events:
            assert [(e.name, e.id) async for e in events] == [
                ("turn.started", f"{turn_id}:1"),
                ("turn.completed", f"{turn_id}:{TOKENS + 2}"),
            ]
        async with http.get(f"{b}/v1/sessions/{sid}/turns/turn_nope/events") as r:
            assert r.status == 404 and (await r.json())["error"]["code"] == "turn_not_found"
        async with http.get(f"{b}/v1/sessions/{sid}/turns/{turn_id}/events", params={"after": "-3"}) as r:
            assert r.status == 400
        assert [e.name async for e in _collected(http, a, sid, turn_id)] == ["turn.started", "turn.completed"]


async def _collected(http: aiohttp.ClientSession, url: str, sid: str, turn_id: str) -> AsyncIterator[Event]:
    async with http.get(f"{url}/v1/sessions/{sid}/turns/{turn_id}/events") as r:
        async for event in sse_events(r):
            yield event


async def test_without_redis_a_follower_on_another_node_polls_the_store(
    tmp_path: Path, mock_factory, pg: StoreConfig, prefix: str, redis_proxy: RedisProxy
) -> None:
    mock: MockServer = await mock_factory(tps=40, tokens=TOKENS)
    store = {"store.backend": "postgres", "store.postgres_url": pg.postgres_url}
    store |= {"store.postgres_schema": pg.postgres_schema, "coordination.key_prefix": prefix}
    store |= {"security.key_pepper": "one-pepper-for-every-node-of-this-test"}  # they share the keys table
    a = await start_server(make_settings(tmp_path / "a", mock.url, **store, **{"coordination.redis_url": REDIS_URL}))
    b_redis = {"coordination.redis_url": redis_proxy.url}  # B reaches Redis through a proxy the test takes away
    b = await start_server(make_settings(tmp_path / "b", mock.url, **store, **b_redis))
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
            sid = await new_session(http, a.url)
            await redis_proxy.stop()  # B loses Redis: no live events reach it
            assert b.services.bus is not None
            await b.services.bus.wait_disconnected()
            posted = await post_turn(http, a.url, sid)
            async with follow(http, b.url, sid, posted.turn_id) as events:
                names = [e.name async for e in events]
            assert posted.task is not None
            await posted.task
            # The stored events, found by polling PostgreSQL; the tokens were live only.
            assert names == ["turn.started", "turn.completed"]
    finally:
        await b.close()
        await a.close()


async def test_a_follower_on_another_node_rides_out_a_redis_outage(
    tmp_path: Path, mock_factory, pg: StoreConfig, prefix: str, redis_proxy: RedisProxy
) -> None:
    mock: MockServer = await mock_factory(tps=20, tokens=100)  # 5 s per turn
    store = {"store.backend": "postgres", "store.postgres_url": pg.postgres_url}
    store |= {"store.postgres_schema": pg.postgres_schema, "coordination.key_prefix": prefix}
    store |= {"security.key_pepper": "one-pepper-for-every-node-of-this-test"}  # they share the keys table
    a = await start_server(make_settings(tmp_path / "a", mock.url, **store, **{"coordination.redis_url": REDIS_URL}))
    b_redis = {"coordination.redis_url": redis_proxy.url}
    b = await start_server(make_settings(tmp_path / "b", mock.url, **store, **b_redis))
    bus = b.services.bus
    assert bus is not None
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
            sid = await new_session(http, a.url)
            posted = await post_turn(http, a.url, sid)
            before: list[Event] = []
            after: list[Event] = []
            left = 0
            async with follow(http, b.url, sid, posted.turn_id) as events:
                async for event in events:
                    if len(before) == 4:
                        after.append(event)
                        continue
                    before.append(event)
                    if len(before) == 4:
                        await redis_proxy.stop()  # B loses Redis mid-turn, then gets it back
                        await bus.wait_disconnected()
                        await redis_proxy.start()
                        await bus.wait_connected(10)
                        left = 102 - len(posted.events)  # what A still had to stream when B was back
            assert posted.task is not None
            await posted.task
        assert [e.name for e in before] == ["turn.started", "token", "token", "token"]
        assert after[-1].name == "turn.completed" and after[-1].id == posted.events[-1].id
        assert left > 10, "the turn ended before B was back: nothing left to show"
        assert [e.name for e in after[:-1]].count("token") >= left // 2  # live again after the reconnect
        assert [e.name for e in after].count("turn.completed") == 1
    finally:
        await b.close()
        await a.close()
