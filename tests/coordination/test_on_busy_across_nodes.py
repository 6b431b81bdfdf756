"""`on_busy` across nodes: two real `agentos serve` processes on one PostgreSQL schema (and one
Redis), one bench mock slow to its first token. A turn that must not replace never fences out
a turn running on another node: reject names it (409), and so do enqueue and steer, which queue
on one node only (docs/conversations.md); rollback fences it out and removes its messages."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agentos.config import StoreConfig
from agentos.mock.server import MockServer
from tests.api.helpers import new_session, turn_events
from tests.coordination.cluster import node_env, pg_rows, serve_nodes
from tests.coordination.conftest import REDIS_URL

pytest.importorskip("asyncpg")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]


@pytest.fixture
async def slow_mock(mock_factory: Any) -> MockServer:
    mock: MockServer = await mock_factory(ttft_ms=2000, tps=200, tokens=3)
    return mock


@asynccontextmanager
async def busy_on_a(
    tmp_path: Path, mock: MockServer, pg: StoreConfig, prefix: str, http: aiohttp.ClientSession
) -> AsyncIterator[tuple[str, str, asyncio.Task[list[Any]]]]:
    """Two nodes; a session whose turn "first" runs on node A, waiting for its first token.
    Yields node B's URL, the session and the task of that turn's events."""
    async with serve_nodes(2, tmp_path, mock.url, node_env(pg, REDIS_URL, prefix)) as (a, b):
        sid = await new_session(http, a.url)
        first = asyncio.create_task(turn_events(http, a.url, sid, "first"))
        await mock.stats.wait_for(lambda s: s.requests == 1, what="turn 1 upstream")
        yield b.url, sid, first


async def test_a_turn_running_on_another_node_is_never_replaced_by_one_that_must_wait(
    tmp_path: Path, slow_mock: MockServer, pg: StoreConfig, prefix: str, http: aiohttp.ClientSession
) -> None:
    async with busy_on_a(tmp_path, slow_mock, pg, prefix, http) as (b_url, sid, first):
        for on_busy in ("reject", "enqueue", "steer"):
            async with http.post(f"{b_url}/v1/sessions/{sid}/turns", json={"input": "x", "on_busy": on_busy}) as r:
                assert r.status == 409, await r.text()
                error = (await r.json())["error"]
            assert error["code"] == "turn_in_progress" and error["turn_id"]
        events = await first
        assert events[-1].name == "turn.completed"  # untouched by the refused ones
        assert error["turn_id"] == events[0].data["turn_id"]
        async with http.post(f"{b_url}/v1/sessions/{sid}/turns", json={"input": "y", "on_busy": "reject"}) as r:
            assert (await r.json())["status"] == "completed"  # idle everywhere now: it runs


async def test_rollback_of_a_turn_on_another_node_removes_its_messages(
    tmp_path: Path, slow_mock: MockServer, pg: StoreConfig, prefix: str, http: aiohttp.ClientSession
) -> None:
    async with busy_on_a(tmp_path, slow_mock, pg, prefix, http) as (b_url, sid, first):
        async with http.post(f"{b_url}/v1/sessions/{sid}/turns", json={"input": "second", "on_busy": "rollback"}) as r:
            assert (await r.json())["status"] == "completed"
        events = await first
        assert events[-1].name == "turn.cancelled" and events[-1].data["reason"] == "superseded"
        rows = await pg_rows(pg, "SELECT role, content FROM messages WHERE session_id = $1 ORDER BY message_id", sid)
        assert [tuple(row) for row in rows][0] == ("user", "second") and len(rows) == 2
