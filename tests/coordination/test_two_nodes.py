"""Two real servers (separate data dirs, one Redis) act for one tenant: its limits and quotas
are the cluster's, not each node's (limits kept per node would multiply by the number of nodes).

Both servers have the same `server.api_token`, so every request acts for tenant "default" with
key id "token", whichever node it reaches. The rate limits run on Redis's clock, not a
FakeClock: the limits are per minute and each test is over in well under an interval.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agentos.api.cluster_limits import ClusterLimiters
from agentos.api.ratelimit import LIMITERS
from agentos.coordination.quotas import ClusterQuotas
from agentos.mock.server import MockServer
from agentos.testing import RunningServer, start_server
from tests.api.helpers import SSE, expect_error
from tests.api.structured_fields import policies
from tests.conftest import REDIS_URL, make_settings

TOKEN = "cluster-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
HI = {"input": "hi"}
Nodes = Callable[..., Awaitable[list[RunningServer]]]


@pytest.fixture
async def nodes(tmp_path: Path, mock: MockServer, prefix: str) -> AsyncIterator[Nodes]:
    started: list[RunningServer] = []

    async def make(count: int = 2, url: str = REDIS_URL, **limits: int) -> list[RunningServer]:
        overrides: dict[str, Any] = {f"tenant_limits.{name}": value for name, value in limits.items()}
        overrides |= {"coordination.redis_url": url, "coordination.key_prefix": prefix, "server.api_token": TOKEN}
        for _ in range(count):
            data_dir = tmp_path / f"node{len(started)}"
            started.append(await start_server(make_settings(data_dir, mock.url, **overrides)))
        return started[-count:]

    yield make
    for server in started:
        await server.close()


async def test_requests_spread_over_two_nodes_share_the_keys_limit(nodes: Nodes, http: aiohttp.ClientSession) -> None:
    a, b = await nodes(key_requests_per_minute=4)
    statuses, remaining = [], []
    for node in (a, b, a, b, a, b):
        async with http.get(f"{node.url}/v1/sessions", headers=AUTH) as r:
            statuses.append(r.status)
            assert policies(r.headers["RateLimit-Policy"]) == {"key": {"q": 4, "w": 60}}
            remaining.append(policies(r.headers["RateLimit"])["key"]["r"])
            if r.status == 429:
                await expect_error(r, 429, "key_rate_limited")
                assert 14 <= int(r.headers["Retry-After"]) <= 15  # one unit back every 15 s
    assert statuses == [200, 200, 200, 200, 429, 429]  # 4 in all, not 4 per node
    assert remaining == [3, 2, 1, 0, 0, 0]


async def test_the_tenants_turns_per_minute_are_counted_across_nodes(nodes: Nodes, http: aiohttp.ClientSession) -> None:
    a, b = await nodes(turns_per_minute=2)
    for node in (a, b):
        assert await start_turn(http, node) == 200
    async with http.post(f"{a.url}/v1/sessions/{await new_session(http, a)}/turns", json=HI, headers=AUTH) as r:
        await expect_error(r, 429, "turn_rate_limited")  # two turns started, one on each node
        assert 29 <= int(r.headers["Retry-After"]) <= 30


async def test_a_failed_start_gives_its_turn_back_cluster_wide(nodes: Nodes, http: aiohttp.ClientSession) -> None:
    a, b = await nodes(turns_per_minute=1)
    async with http.post(f"{a.url}/v1/sessions/missing/turns", json=HI, headers=AUTH) as r:
        await expect_error(r, 404)  # no such session: the unit is given back, in the background
    limiters = a.app[LIMITERS]
    assert isinstance(limiters, ClusterLimiters)
    await limiters.flush()
    assert await start_turn(http, b) == 200  # the one unit of the minute, still there
    assert await start_turn(http, a) == 429


async def new_session(http: aiohttp.ClientSession, node: RunningServer) -> str:
    async with http.post(f"{node.url}/v1/sessions", json={}, headers=AUTH) as r:
        assert r.status == 201, await r.text()
        session_id: str = (await r.json())["id"]
        return session_id


async def start_turn(http: aiohttp.ClientSession, node: RunningServer) -> int:
    """A turn on a new session of `node`, run to its end; its status."""
    async with http.post(f"{node.url}/v1/sessions/{await new_session(http, node)}/turns", json=HI, headers=AUTH) as r:
        await r.read()
        return r.status


async def test_the_sessions_quota_is_counted_across_nodes(nodes: Nodes, http: aiohttp.ClientSession) -> None:
    a, b = await nodes(max_sessions=3)
    made = []
    for node in (a, b, a):
        async with http.post(f"{node.url}/v1/sessions", json={}, headers=AUTH) as r:
            assert r.status == 201
            made.append((node, (await r.json())["id"]))
    for node in (a, b):
        async with http.post(f"{node.url}/v1/sessions", json={}, headers=AUTH) as r:
            await expect_error(r, 403, "quota_sessions")
    first_node, first_id = made[0]
    async with http.delete(f"{first_node.url}/v1/sessions/{first_id}", headers=AUTH) as r:
        assert r.status == 204
    quotas = first_node.services.quotas
    assert isinstance(quotas, ClusterQuotas)
    await quotas.flush()  # the release goes to Redis in the background
    await new_session(http, b)  # the delete on a freed one on b
    async with http.post(f"{b.url}/v1/sessions", json={}, headers=AUTH) as r:
        await expect_error(r, 403, "quota_sessions")


async def test_tokens_per_day_are_counted_across_nodes(nodes: Nodes, http: aiohttp.ClientSession) -> None:
    a, b = await nodes(tokens_per_day=1)
    async with http.post(f"{a.url}/v1/sessions", json={}, headers=AUTH) as r:
        session_id = (await r.json())["id"]
    async with http.post(f"{a.url}/v1/sessions/{session_id}/turns", json={"input": "hi"}, headers=SSE | AUTH) as r:
        assert r.status == 200
        await r.read()  # the turn's usage is counted when it completes
    quotas = a.services.quotas
    assert isinstance(quotas, ClusterQuotas)
    await quotas.flush()
    async with http.post(f"{b.url}/v1/sessions", json={}, headers=AUTH) as r:
        other = (await r.json())["id"]
    async with http.post(f"{b.url}/v1/sessions/{other}/turns", json={"input": "hi"}, headers=AUTH) as r:
        await expect_error(r, 403, "quota_tokens_per_day")  # a's tokens count on b


async def test_a_first_start_over_an_existing_store_seeds_the_count(
    tmp_path: Path, mock: MockServer, prefix: str, http: aiohttp.ClientSession
) -> None:
    """Sessions made before Redis was configured count; a later node with an empty store
    does not reset the count to its own 0."""
    plain = make_settings(tmp_path / "old", mock.url, **{"server.api_token": TOKEN})
    server = await start_server(plain)
    for _ in range(2):
        async with http.post(f"{server.url}/v1/sessions", json={}, headers=AUTH) as r:
            assert r.status == 201
    await server.close()
    shared: dict[str, Any] = {"coordination.redis_url": REDIS_URL, "coordination.key_prefix": prefix}
    shared |= {"server.api_token": TOKEN, "tenant_limits.max_sessions": 3}
    old = await start_server(make_settings(tmp_path / "old", mock.url, **shared))
    new = await start_server(make_settings(tmp_path / "new", mock.url, **shared))
    try:
        async with http.post(f"{new.url}/v1/sessions", json={}, headers=AUTH) as r:
            assert r.status == 201  # the third
        async with http.post(f"{new.url}/v1/sessions", json={}, headers=AUTH) as r:
            await expect_error(r, 403, "quota_sessions")
    finally:
        await new.close()
        await old.close()


async def test_without_redis_each_node_would_admit_the_whole_limit(
    tmp_path: Path, mock: MockServer, http: aiohttp.ClientSession
) -> None:
    """The bug the shared limiter removes, shown by the same requests as above: per node, a
    limit of 4 admits 4 on each node (so the test above fails if the limits are per node)."""
    overrides = {"server.api_token": TOKEN, "tenant_limits.key_requests_per_minute": 4}
    a = await start_server(make_settings(tmp_path / "a", mock.url, **overrides))
    b = await start_server(make_settings(tmp_path / "b", mock.url, **overrides))
    try:
        statuses = []
        for node in (a, b, a, b, a, b):
            async with http.get(f"{node.url}/v1/sessions", headers=AUTH) as r:
                statuses.append(r.status)
        assert statuses == [200] * 6
    finally:
        await b.close()
        await a.close()
