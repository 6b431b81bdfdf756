"""A Redis restart under load: three real nodes on one PostgreSQL schema, reaching the real Redis
through a TCP proxy the test cuts (every connection drops, new ones are refused), while the
keys of the test's prefix are deleted (a Redis that restarted without persistence holds
nothing), then restores. The turns under way end (no hang), every acknowledged answer is in
PostgreSQL, and the nodes serve on without a restart, under the cluster's provider limit again.

The shared Redis itself is never stopped: other tests use it.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from redis.asyncio import Redis

from agentos.config import StoreConfig
from agentos.mock.server import MockServer
from agentos.testing.tcp_proxy import TcpProxy
from tests.api.helpers import new_session
from tests.conftest import REDIS_URL
from tests.coordination.cluster import Node, node_env, pg_rows, serve_nodes
from tests.coordination.test_node_loss import completed_turn

pytest.importorskip("asyncpg")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

LIMIT = 6
TURNS = 48


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as session:
        yield session


async def turns(http: aiohttp.ClientSession, nodes: list[Node], count: int) -> list[str | None]:
    """`count` turns at once, spread over the nodes: the ids of those acknowledged."""
    sessions = await asyncio.gather(*(new_session(http, nodes[i % 3].url) for i in range(count)))
    runs = (completed_turn(http, nodes[i % 3], sessions[i], asyncio.Event()) for i in range(count))
    return list(await asyncio.gather(*runs))


async def held(http: aiohttp.ClientSession, node: Node) -> int:
    async with http.get(f"{node.url}/metrics") as response:
        text = await response.text()
    match = re.search(r"^agentos_cluster_permits_held (\S+)$", text, re.M)
    assert match is not None, text
    return int(float(match.group(1)))


async def test_a_redis_restart_under_load_loses_nothing_and_the_limit_holds_after(
    tmp_path: Path, mock_factory: Any, pg: StoreConfig, prefix: str, http: aiohttp.ClientSession
) -> None:
    mock: MockServer = await mock_factory(ttft_ms=300, tps=50, tokens=10)  # ~0.5 s per stream
    redis = Redis.from_url(REDIS_URL)
    try:
        async with TcpProxy("127.0.0.1", 6379) as proxy:
            env = node_env(pg, f"redis://127.0.0.1:{proxy.port}/0", prefix) | {
                "AGENTOS_CONCURRENCY_LIMIT": str(LIMIT),
                "AGENTOS_COORDINATION_EXPECTED_NODES": "3",
                "AGENTOS_COORDINATION_PERMIT_LEASE_S": "3",
                "AGENTOS_COORDINATION_TIMEOUT_S": "2.0",  # a loaded CI machine is not an outage
            }
            async with serve_nodes(3, tmp_path, mock.url, env) as nodes:
                load = asyncio.create_task(turns(http, nodes, TURNS))
                await mock.stats.wait_for(lambda s: s.requests >= LIMIT, timeout_s=30, what="the load under way")
                await proxy.cut()  # Redis restarts...
                keys = [key async for key in redis.scan_iter(match=f"{prefix}*")]
                await redis.delete(*keys)  # ...empty
                await proxy.restore()
                first = await asyncio.wait_for(load, 90)  # every turn ends: none hangs
                # Recovery without a restart: the nodes serve a second load under the limit.
                assert [await held(http, node) for node in nodes] == [0, 0, 0]
                mock.stats.max_concurrent = mock.stats.in_flight
                second = await turns(http, nodes, TURNS)
            rows = await pg_rows(pg, "SELECT turn_id, role, status FROM messages")
    finally:
        await redis.aclose()
    acknowledged = {turn_id for turn_id in first + second if turn_id is not None}
    answered = {turn_id for turn_id, role, status in rows if role == "assistant" and status == "completed"}
    assert acknowledged - answered == set()  # 0 acknowledged answers lost
    assert all(second)  # after the restart every turn completes again...
    assert mock.stats.max_concurrent <= LIMIT  # ...and the cluster's limit holds again
    assert len([t for t in first if t is not None]) >= TURNS // 2  # the outage cost little: nothing fails for it
