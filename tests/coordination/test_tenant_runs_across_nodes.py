"""Two real servers (separate data dirs, one Redis): a tenant's `max_active_runs` bounds its
working runs over both nodes together, and a run that ends frees a place on the other node."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest

from agentos.config import settings_from_dict
from agentos.mock.server import MockServer
from agentos.testing import RunningServer, eventually, start_server
from tests.api.helpers import expect_error
from tests.conftest import REDIS_URL

CAP = 2
Nodes = Callable[[MockServer], Awaitable[list[RunningServer]]]


@pytest.fixture
async def two_nodes(tmp_path: Path, prefix: str) -> AsyncIterator[Nodes]:
    started: list[RunningServer] = []

    async def make(mock: MockServer) -> list[RunningServer]:
        for i in range(2):
            settings = settings_from_dict(
                {
                    "data_dir": str(tmp_path / f"node{i}"),
                    "provider": {"url": mock.url},
                    "coordination": {"redis_url": REDIS_URL, "key_prefix": prefix},
                    "tenant_limits": {"max_active_runs": CAP},
                    "agents": {"slow": {"tools": []}},
                }
            )
            started.append(await start_server(settings))
        return started

    yield make
    for server in started:
        await server.close()


async def start_run(http: aiohttp.ClientSession, node: RunningServer) -> str | None:
    """A run of the slow agent on `node`: its id, or None if refused with the tenant's code."""
    async with http.post(f"{node.url}/v1/agents/slow/runs", json={"input": "go"}) as r:
        if r.status == 202:
            run_id: str = (await r.json())["run_id"]
            return run_id
        await expect_error(r, 429, "tenant_active_runs")
        return None


async def test_a_tenants_active_runs_are_capped_over_both_nodes(
    two_nodes: Nodes, mock_factory: Callable[..., Awaitable[MockServer]], http: aiohttp.ClientSession
) -> None:
    mock = await mock_factory(ttft_ms=20_000, tokens=1)  # runs that stay working until terminated
    a, b = await two_nodes(mock)
    first = await start_run(http, a)
    assert first is not None and await start_run(http, b) is not None
    assert await start_run(http, a) is None  # CAP over both nodes, not CAP on each
    assert await start_run(http, b) is None
    async with http.post(f"{a.url}/v1/runs/{first}/terminate") as r:
        assert r.status == 200, await r.text()

    async def admitted_on_b() -> bool:
        return await start_run(http, b) is not None

    await eventually(admitted_on_b, timeout_s=10, what="b admitting the ended run's place")
    assert await start_run(http, b) is None
