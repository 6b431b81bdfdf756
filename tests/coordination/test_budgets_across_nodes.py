"""Issue 27's proof: three real `agentos serve` processes (one PostgreSQL schema, one Redis, the
real mock provider over HTTP) and 300 concurrent turns against a tenant budget that fits exactly
100 worst cases: at most 100 are accepted (exactly 100 when every turn is admitted before any
call settles, which the mock's slow first token gives and the test checks), the other 200 are
402 `budget_exceeded` before any stream, and what was spent, counted in Redis, is never past
the budget.

The model `m` costs 10 per million output tokens with `max_tokens = 100`: a worst case of 0.001
whatever the prompt; the mock answers 4 tokens (0.00004).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
from redis.asyncio import Redis

from agentos.config import StoreConfig
from agentos.mock.server import MockServer
from agentos.testing import sse_events
from tests.api.helpers import SSE, new_session
from tests.conftest import REDIS_URL
from tests.coordination.cluster import node_env, serve_nodes

pytestmark = pytest.mark.slow

WORST_MICROS = 1_000  # 100 tokens at 10 per million
REAL_MICROS = 40  # the mock's 4 tokens
BUDGET = 0.1  # exactly 100 worst cases
CONFIG = """
[providers.mock]
url = "{url}"
max_retries = 0

[models.m]
targets = [{{ provider = "mock", model = "mock-1", max_tokens = 100, price = {{ output = 10.0 }} }}]

[routing]
default_model = "m"
"""


async def spent_micros(prefix: str) -> int:
    """The default tenant's spend today over every node, read straight from Redis."""
    redis = Redis.from_url(REDIS_URL)
    try:
        keys = [k async for k in redis.scan_iter(match=f"{prefix}budget:tenant:default:day:*") if b"lapse" not in k]
        return sum([int(await redis.hget(key, "spent") or 0) for key in keys])
    finally:
        await redis.aclose()


async def test_300_turns_on_three_nodes_never_spend_past_a_budget_of_100_worst_cases(
    tmp_path: Path, pg: StoreConfig, prefix: str, mock_factory: Callable[..., Awaitable[MockServer]]
) -> None:
    mock = await mock_factory(ttft_ms=5000)  # no call settles while the 300 are being admitted
    config = tmp_path / "agentos.toml"
    config.write_text(CONFIG.format(url=mock.url))
    env = node_env(pg, REDIS_URL, prefix) | {
        "AGENTOS_TENANT_LIMITS_BUDGET_PER_DAY": str(BUDGET),
        "AGENTOS_CONCURRENCY_LIMIT": "400",  # every accepted turn streams at once: none waits for a permit
        "AGENTOS_COORDINATION_EXPECTED_NODES": "3",
        "AGENTOS_COORDINATION_TIMEOUT_S": "2.0",  # a loaded machine must not look like a Redis outage
    }
    connector = aiohttp.TCPConnector(limit=0)  # 300 requests at once: the client must not queue them
    async with (
        serve_nodes(3, tmp_path, mock.url, env, ["--config", str(config)]) as nodes,
        aiohttp.ClientSession(connector=connector) as http,
    ):
        sessions = [(node.url, await new_session(http, node.url)) for node in nodes for _ in range(100)]

        async def open_turn(url: str, session_id: str) -> aiohttp.ClientResponse:
            return await http.post(f"{url}/v1/sessions/{session_id}/turns", json={"input": "hi"}, headers=SSE)

        answers = await asyncio.gather(*(open_turn(url, sid) for url, sid in sessions))
        settled_while_admitting = mock.stats.completed
        accepted = [r for r in answers if r.status == 200]
        refused = [r for r in answers if r.status == 402]
        assert len(accepted) + len(refused) == 300, sorted({r.status for r in answers})
        assert len(accepted) <= 100
        if settled_while_admitting == 0:
            assert len(accepted) == 100
        for response in refused:
            error = (await response.json())["error"]
            assert error["code"] == "budget_exceeded" and "'tenant:default:day'" in error["message"]
        ends = []
        for response in accepted:
            ends.append([e.name async for e in sse_events(response)][-1])
            response.release()
        assert ends == ["turn.completed"] * len(accepted)
        spent = await spent_micros(prefix)
        assert spent == REAL_MICROS * len(accepted) <= BUDGET * 1_000_000
