"""Three real `agentos serve` processes, one Redis, ONE mock provider: `kernel.concurrency_limit`
bounds the streams of all the nodes together, as the provider itself counts them; and a node
killed with -9 while it holds slots gives them back within the lease.

Each node has its own data dir (SQLite): the semaphore needs only Redis.
"""

from __future__ import annotations

import asyncio
import re
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest

from agentos.mock.server import MockServer
from tests.api.helpers import new_session, turn_events
from tests.conftest import REDIS_URL, child_env

pytestmark = pytest.mark.slow

LIMIT = 8
Node = tuple[asyncio.subprocess.Process, str]
Nodes = Callable[..., Awaitable[list[Node]]]


@pytest.fixture
async def nodes(tmp_path: Path, prefix: str) -> AsyncIterator[Nodes]:
    started: list[asyncio.subprocess.Process] = []

    async def start(index: int, provider_url: str, lease_s: float) -> Node:
        env = {
            "AGENTOS_COORDINATION_REDIS_URL": REDIS_URL,
            "AGENTOS_COORDINATION_KEY_PREFIX": prefix,
            "AGENTOS_COORDINATION_PERMIT_LEASE_S": str(lease_s),
            "AGENTOS_CONCURRENCY_LIMIT": str(LIMIT),
            "AGENTOS_COORDINATION_EXPECTED_NODES": "3",
            # a loaded 2-core CI machine must not be taken for a Redis outage (the share would decide)
            "AGENTOS_COORDINATION_TIMEOUT_S": "2.0",
        }
        data_dir = str(tmp_path / f"node{index}")
        proc = await asyncio.create_subprocess_exec(
            *[sys.executable, "-m", "agentos", "serve", "--port", "0", "--data-dir", data_dir],
            *["--provider-url", provider_url],
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            env=child_env(**env),
        )
        started.append(proc)
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
        assert line.startswith("agentos listening on "), line
        return proc, line.split()[-1]

    async def make(mock: MockServer, count: int = 3, lease_s: float = 10.0) -> list[Node]:
        return list(await asyncio.gather(*(start(i, mock.url, lease_s) for i in range(count))))

    yield make
    for proc in started:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_the_providers_own_count_never_exceeds_the_limit_over_three_nodes(
    nodes: Nodes, mock_factory: Callable[..., Awaitable[MockServer]], http: aiohttp.ClientSession
) -> None:
    mock = await mock_factory(ttft_ms=300, tokens=4, tps=200)  # each stream open ~0.3 s: they overlap
    urls = [url for _, url in await nodes(mock)]
    per_node = 20  # 60 turns at once; each node alone would let LIMIT of its own through (24)
    targets = [urls[i % 3] for i in range(3 * per_node)]
    sessions = await asyncio.gather(*(new_session(http, url) for url in targets))
    results = await asyncio.gather(*(turn_events(http, u, s) for u, s in zip(targets, sessions, strict=True)))
    assert [events[-1].name for events in results] == ["turn.completed"] * len(targets)
    assert mock.stats.requests == len(targets)
    assert mock.stats.max_concurrent == LIMIT  # reached, never exceeded, by the three together


async def test_a_node_killed_while_holding_slots_gives_them_back_within_the_lease(
    nodes: Nodes, mock_factory: Callable[..., Awaitable[MockServer]], http: aiohttp.ClientSession
) -> None:
    lease_s = 1.0
    mock = await mock_factory(ttft_ms=20_000, tokens=1)  # streams that stay open until the test ends
    (victim, a), (_, b), (_, c) = await nodes(mock, lease_s=lease_s)
    held = [asyncio.create_task(turn_events(http, a, await new_session(http, a))) for _ in range(LIMIT)]
    waiting: list[asyncio.Task[object]] = []
    try:
        await mock.stats.wait_for(lambda s: s.in_flight == LIMIT, timeout_s=20, what="a holding every slot")
        for url in (b, c, b, c):
            waiting.append(asyncio.create_task(turn_events(http, url, await new_session(http, url))))
        with pytest.raises(TimeoutError):  # the cluster is full: they wait, none reaches the provider
            await mock.stats.wait_for(lambda s: s.requests > LIMIT, timeout_s=1.0)
        assert await gauges(http, a) == (LIMIT, 0)  # held, waiting (agentos_cluster_permits_*)
        assert await gauges(http, b) == (0, 2)
        loop = asyncio.get_running_loop()
        victim.send_signal(signal.SIGKILL)  # no release, no goodbye: only the lease ends its slots
        killed_at = loop.time()
        await mock.stats.wait_for(lambda s: s.requests == LIMIT + 4, timeout_s=10, what="the waiters on b and c")
        # the lease, plus one retry of the waiting line (0.5 s), plus room for a loaded machine
        assert loop.time() - killed_at < lease_s + 2.0
    finally:
        for task in [*held, *waiting]:
            task.cancel()
        await asyncio.gather(*held, *waiting, return_exceptions=True)


async def gauges(http: aiohttp.ClientSession, url: str) -> tuple[int, int]:
    """A node's `agentos_cluster_permits_held` and `_waiting`."""
    async with http.get(f"{url}/metrics") as response:
        text = await response.text()
    values = {}
    for name in ("held", "waiting"):
        match = re.search(rf"^agentos_cluster_permits_{name} (\S+)$", text, re.M)
        assert match is not None, text
        values[name] = int(float(match.group(1)))
    return values["held"], values["waiting"]
