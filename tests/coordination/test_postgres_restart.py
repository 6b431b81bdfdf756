"""A PostgreSQL restart under load: three real nodes sharing one schema and one Redis, reaching
PostgreSQL through a TCP proxy the test cuts (every connection drops, new ones are refused) and
restores. While it is down every node says so (`/readyz` 503) and every turn ends, completed or
failed with a reason (`store_unavailable`), none hangs; afterwards every node is ready again and
serves a second load in full, with no restart, and every acknowledged answer is in PostgreSQL.

The real PostgreSQL is never stopped: other tests use it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import msgspec
import pytest

from agentos.config import StoreConfig
from agentos.mock.server import MockServer
from agentos.testing import sse_events
from agentos.testing.tcp_proxy import TcpProxy
from tests.api.helpers import SSE, new_session
from tests.conftest import REDIS_URL
from tests.coordination.cluster import Node, node_env, pg_rows, serve_nodes

pytest.importorskip("asyncpg")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

TURNS = 48


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as session:
        yield session


async def outcome(http: aiohttp.ClientSession, node: Node, session_id: str) -> tuple[str, str]:
    """How one turn ended for its client: ("turn.completed", turn id), ("turn.failed", reason)..."""
    async with http.post(f"{node.url}/v1/sessions/{session_id}/turns", json={"input": "hi"}, headers=SSE) as r:
        if r.status != 200:
            return f"http {r.status}", (await r.json())["error"]["code"]
        async for event in sse_events(r):
            if event.name.startswith("turn.") and event.name != "turn.started":
                return event.name, str(event.data["turn_id" if event.name == "turn.completed" else "reason"])
    return "no end", ""


async def load(http: aiohttp.ClientSession, nodes: list[Node], sessions: list[str]) -> list[tuple[str, str]]:
    return list(await asyncio.gather(*(outcome(http, nodes[i % len(nodes)], s) for i, s in enumerate(sessions))))


async def ready(http: aiohttp.ClientSession, node: Node, status: int) -> None:
    """`/readyz` until it answers `status` (its answer is cached for about 1 s)."""
    async with asyncio.timeout(15):
        while True:
            async with http.get(f"{node.url}/readyz") as r:
                if r.status == status:
                    return
            await asyncio.sleep(0.1)  # another process's state: ask again


async def test_a_postgres_restart_under_load_is_clear_errors_then_recovery_without_a_restart(
    tmp_path: Path, mock_factory: Any, pg: StoreConfig, prefix: str, http: aiohttp.ClientSession
) -> None:
    mock: MockServer = await mock_factory(ttft_ms=300, tps=50, tokens=10)  # ~0.5 s per turn
    target = urlsplit(pg.postgres_url)
    async with TcpProxy(target.hostname or "127.0.0.1", target.port or 5432) as proxy:
        proxied = target._replace(netloc=f"{target.username}@127.0.0.1:{proxy.port}").geturl()
        env = node_env(msgspec.structs.replace(pg, postgres_url=proxied), REDIS_URL, prefix)
        async with serve_nodes(3, tmp_path, mock.url, env) as nodes:
            sessions = await asyncio.gather(*(new_session(http, nodes[i % 3].url) for i in range(2 * TURNS + 3)))
            first = asyncio.create_task(load(http, nodes, sessions[:TURNS]))
            await mock.stats.wait_for(lambda s: s.requests >= TURNS // 4, timeout_s=30, what="the load under way")
            await proxy.cut()  # PostgreSQL restarts
            for node in nodes:
                await ready(http, node, 503)  # each node says it is not ready
            during = await load(http, nodes, sessions[2 * TURNS :])  # one turn per node in the outage
            await proxy.restore()
            for node in nodes:
                await ready(http, node, 200)  # ...and is again, with no restart
            ended = await asyncio.wait_for(first, 60)  # every turn ends: none hangs
            second = await load(http, nodes, sessions[TURNS : 2 * TURNS])
    rows = await pg_rows(pg, "SELECT turn_id, role, status FROM messages")
    answered = {turn_id for turn_id, role, status in rows if role == "assistant" and status == "completed"}
    acknowledged = {turn_id for name, turn_id in ended + second if name == "turn.completed"}
    assert acknowledged - answered == set()  # 0 acknowledged answers lost
    # A turn under way at the cut completes (its answer's write waits in its queue for the store)
    # or fails with the reason; which one depends on how far it had come (the machine's pace).
    kinds = {(name, detail if name != "turn.completed" else "") for name, detail in ended}
    assert kinds <= {("turn.completed", ""), ("turn.failed", "store_unavailable"), ("http 503", "store_unavailable")}
    # A turn that starts in the outage ends at once, with the reason, on every node.
    assert {(name, detail) for name, detail in during} <= {
        ("turn.failed", "store_unavailable"),
        ("http 503", "store_unavailable"),
    }
    assert [name for name, _ in second] == ["turn.completed"] * TURNS  # recovered in full
