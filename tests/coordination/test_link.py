"""Start-up and outages: a configured Redis that does not answer stops start-up with one line
naming the key; one that goes away later costs requests neither a hang nor a 500: each node
falls back to its share of the limits, logs the outage once, and returns to Redis after."""

from __future__ import annotations

import asyncio
import logging
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from redis.asyncio import Redis

from agentos.config import load_settings
from agentos.errors import ConfigError
from agentos.mock.server import MockServer
from agentos.testing import RunningServer, eventually, start_server
from tests.api.structured_fields import policies
from tests.conftest import REDIS_URL, child_env, make_settings
from tests.coordination.conftest import RedisProxy


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_an_unreachable_redis_stops_start_up_naming_the_key(tmp_path: Path, mock: MockServer) -> None:
    url = f"redis://:s3cret@127.0.0.1:{closed_port()}/0"
    settings = make_settings(tmp_path, mock.url, **{"coordination.redis_url": url})
    with pytest.raises(ConfigError) as caught:
        await start_server(settings)
    message = str(caught.value)
    assert message.startswith("coordination.redis_url: Redis at redis://127.0.0.1:") and "\n" not in message
    assert "s3cret" not in message


async def test_without_the_package_the_error_names_the_extra(
    tmp_path: Path, mock: MockServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "redis.asyncio", None)  # as if `redis` were not installed
    settings = make_settings(tmp_path, mock.url, **{"coordination.redis_url": "redis://127.0.0.1:6379/0"})
    with pytest.raises(ConfigError, match=r"pip install 'agentos\[redis\]'"):
        await start_server(settings)


def test_the_url_comes_from_the_environment_and_is_checked() -> None:
    env = {"AGENTOS_COORDINATION_REDIS_URL": "redis://127.0.0.1:6379/0", "AGENTOS_COORDINATION_EXPECTED_NODES": "3"}
    settings = load_settings(None, environ=env)
    assert settings.coordination.redis_url == "redis://127.0.0.1:6379/0"
    assert settings.coordination.expected_nodes == 3
    with pytest.raises(ConfigError, match="coordination.redis_url"):
        load_settings(None, environ={"AGENTOS_COORDINATION_REDIS_URL": "http://127.0.0.1:6379"})


def test_without_a_url_nothing_imports_redis() -> None:
    code = (
        "import sys, agentos.cli, agentos.services, agentos.api.app, agentos.api.cluster_limits;"
        "sys.exit('redis' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code], env=child_env(), timeout=60).returncode == 0


async def remaining(http: aiohttp.ClientSession, server: RunningServer) -> int:
    """One request; the key's units left that its RateLimit header reports (it must be a 200)."""
    started = time.monotonic()
    async with http.get(f"{server.url}/v1/sessions") as r:
        assert r.status == 200, await r.text()
        assert time.monotonic() - started < 5.0  # a silent Redis must not hold a request
        return int(policies(r.headers["RateLimit"])["key"]["r"])


async def test_while_redis_is_away_each_node_applies_its_share_then_returns(
    tmp_path: Path,
    mock: MockServer,
    prefix: str,
    redis_proxy: RedisProxy,
    http: aiohttp.ClientSession,
    caplog: pytest.LogCaptureFixture,
) -> None:
    overrides: dict[str, Any] = {"coordination.redis_url": redis_proxy.url, "coordination.key_prefix": prefix}
    overrides |= {"coordination.timeout_s": 0.2, "coordination.expected_nodes": 2}
    server = await start_server(
        make_settings(tmp_path, mock.url, **overrides, **{"tenant_limits.key_requests_per_minute": 100})
    )
    try:
        caplog.set_level(logging.WARNING, logger="agentos.coordination")
        assert [await remaining(http, server) for _ in range(3)] == [99, 98, 97]  # in Redis
        redis_proxy.mode = "silent"  # Redis accepts and never answers
        assert [await remaining(http, server) for _ in range(2)] == [49, 48]  # this node's share: 100 / 2
        redis_proxy.mode = "forward"

        async def back_on_redis() -> bool:  # polls may spend the local share: 429s are fine here
            async with http.get(f"{server.url}/v1/sessions") as r:
                return int(policies(r.headers["RateLimit"])["key"]["r"]) > 50

        await eventually(back_on_redis, timeout_s=10.0, what="the node decides in Redis again")
        await redis_proxy.stop()  # now Redis refuses connections
        async with http.get(f"{server.url}/v1/sessions") as r:  # the share again, where it was left
            left = policies(r.headers["RateLimit"])["key"]["r"]
            assert isinstance(left, int) and left <= 47
        outages = [r for r in caplog.records if "Redis unreachable" in r.getMessage()]
        recoveries = [r for r in caplog.records if "Redis answers again" in r.getMessage()]
        assert len(outages) == 2 and len(recoveries) == 1  # once per outage, not per request
    finally:
        await server.close()


async def test_a_redis_that_comes_back_empty_is_seeded_again(
    tmp_path: Path, mock: MockServer, prefix: str, redis_proxy: RedisProxy, http: aiohttp.ClientSession
) -> None:
    overrides: dict[str, Any] = {"coordination.redis_url": redis_proxy.url, "coordination.key_prefix": prefix}
    overrides |= {"coordination.timeout_s": 0.2, "tenant_limits.max_sessions": 10_000}
    server = await start_server(make_settings(tmp_path, mock.url, **overrides))
    direct = Redis.from_url(REDIS_URL)
    counter = f"{prefix}quota:sessions:default"
    created = 0

    async def create() -> bool:  # a create always counts in Redis, when Redis answers
        nonlocal created
        async with http.post(f"{server.url}/v1/sessions", json={}) as r:
            assert r.status == 201
            created += 1
        return await direct.get(counter) is not None

    try:
        assert [await create() for _ in range(2)] == [True, True]
        assert await direct.get(counter) == b"2"
        redis_proxy.mode = "silent"
        await create()  # counted by the node alone meanwhile
        await direct.delete(counter)  # as if Redis restarted without its data
        redis_proxy.mode = "forward"
        await eventually(create, timeout_s=10.0, what="the sessions counter is seeded again")
        assert await direct.get(counter) == str(created).encode()  # the node's count, not 0 + 1
    finally:
        await direct.aclose()
        await server.close()


async def test_more_calls_at_once_than_the_pool_holds_wait_for_a_connection_not_an_outage() -> None:
    """redis-py's own pool refuses a call past its connections at once (MaxConnectionsError),
    which read as an outage at 1000 turns a node. Three times the pool's calls, each holding
    its connection 50 ms (`WAIT 1 50`: no replica comes, it answers 0 after 50 ms), all answer
    and the link stays up."""
    from agentos.config import CoordinationConfig
    from agentos.coordination.link import POOL_MAX, open_link

    link = await open_link(CoordinationConfig(redis_url=REDIS_URL, timeout_s=2.0))
    try:
        results = await asyncio.gather(
            *(link.call(lambda: link.redis.execute_command("WAIT", 1, 50)) for _ in range(3 * POOL_MAX))  # type: ignore[no-untyped-call,unused-ignore]  # redis-py types vary by release
        )
        assert results == [0] * (3 * POOL_MAX)  # None would be a call the link gave up on
        assert not link.down
        assert await link.call(link.redis.ping) is True
    finally:
        await link.close()
