"""Two real `agentos serve` processes, one Redis, one mock provider: a tenant's
`max_concurrent_turns` bounds its turns over both nodes together (a cap kept per node would
let each node admit the full cap), a turn that ends frees a place on the other node, and a node
killed with -9 gives its turns' places back within the lease.

Each node has its own data dir (SQLite); the default tenant gets `[tenant_limits]`.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest

from agentos.mock.server import MockServer
from agentos.testing import eventually
from tests.api.helpers import SSE, expect_error, new_session
from tests.conftest import REDIS_URL, child_env

pytestmark = pytest.mark.slow

CAP = 3
LEASE_S = 1.0
Node = tuple[asyncio.subprocess.Process, str]


@pytest.fixture
async def two_nodes(tmp_path: Path, prefix: str) -> AsyncIterator[Callable[[MockServer], Awaitable[list[Node]]]]:
    started: list[asyncio.subprocess.Process] = []

    async def start(index: int, provider_url: str) -> Node:
        env = {
            "AGENTOS_COORDINATION_REDIS_URL": REDIS_URL,
            "AGENTOS_COORDINATION_KEY_PREFIX": prefix,
            "AGENTOS_COORDINATION_PERMIT_LEASE_S": str(LEASE_S),
            "AGENTOS_COORDINATION_EXPECTED_NODES": "2",
            "AGENTOS_COORDINATION_TIMEOUT_S": "2.0",  # a loaded machine must not look like a Redis outage
            "AGENTOS_TENANT_LIMITS_MAX_CONCURRENT_TURNS": str(CAP),
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

    async def make(mock: MockServer) -> list[Node]:
        return list(await asyncio.gather(*(start(i, mock.url) for i in range(2))))

    yield make
    for proc in started:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


class Turns:
    """Turns that stay open (the mock answers after 20 s) until `end` or the test's end."""

    def __init__(self, http: aiohttp.ClientSession) -> None:
        self.http = http
        self.open: list[aiohttp.ClientResponse] = []

    async def start(self, url: str) -> bool:
        """A turn on a new session of `url`: True if admitted (left open), False if refused
        with the tenant's code."""
        session = await new_session(self.http, url)
        response = await self.http.post(f"{url}/v1/sessions/{session}/turns", json={"input": "hi"}, headers=SSE)
        if response.status == 200:
            self.open.append(response)
            return True
        await expect_error(response, 429, "tenant_concurrent_turns")
        response.release()
        return False

    def end(self, index: int) -> None:
        """The client goes away: its node cancels the turn and ends it."""
        self.open.pop(index).close()

    def close(self) -> None:
        for response in self.open:
            response.close()


async def test_a_tenants_concurrent_turns_are_capped_over_both_nodes(
    two_nodes: Callable[[MockServer], Awaitable[list[Node]]],
    mock_factory: Callable[..., Awaitable[MockServer]],
    http: aiohttp.ClientSession,
) -> None:
    mock = await mock_factory(ttft_ms=20_000, tokens=1)
    (victim, a), (_, b) = await two_nodes(mock)
    turns = Turns(http)
    try:
        assert [await turns.start(url) for url in (a, a, b)] == [True, True, True]
        assert not await turns.start(a)  # CAP over both nodes, not CAP on each
        assert not await turns.start(b)
        turns.end(0)  # one of a's turns ends: its place is free for b
        await eventually(lambda: turns.start(b), timeout_s=10, what="b admitting the freed place")
        assert not await turns.start(b)
        loop = asyncio.get_running_loop()
        victim.send_signal(signal.SIGKILL)  # a still holds one: no release, only its lease ends it
        killed_at = loop.time()
        await eventually(lambda: turns.start(b), timeout_s=10, what="b admitting the dead node's place")
        assert loop.time() - killed_at < LEASE_S + 2.0  # the lease, and room for a loaded machine
        # b's own three are older than a lease now: its heartbeat renewed them, they still count
        assert not await turns.start(b)
    finally:
        turns.close()
