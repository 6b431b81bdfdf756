"""PostgreSQL cut at the worst moments (issue 32): two real nodes on one schema and one Redis,
turns and runs in flight on both, PostgreSQL reached through a TCP proxy that cuts every
connection the moment a chosen operation is sent: a batch's COMMIT, a fenced write (a turn's
answer, fenced by its epoch), the follow connection's LISTEN. Whatever was in the middle:

- every turn ends completed or failed with `store_unavailable` (HTTP 503 before it started),
  never `internal_error`; no acknowledged answer is lost; no run answers a 500;
- each node logs the outage as one line when it starts and one when it ends, with no traceback
  (asyncpg's per-reconnect tracebacks are filtered);
- once PostgreSQL is back, both nodes serve a second load in full, with no restart.

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
from agentos.testing.tcp_proxy import TcpProxy
from tests.api.helpers import new_session
from tests.conftest import REDIS_URL
from tests.coordination.cluster import Node, node_env, pg_rows, serve_nodes
from tests.coordination.test_postgres_restart import load, ready

pytest.importorskip("asyncpg")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

TURNS = 24
RUNS = 4
OK = {("turn.completed", ""), ("turn.failed", "store_unavailable"), ("http 503", "store_unavailable")}


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as session:
        yield session


async def start_runs(http: aiohttp.ClientSession, nodes: list[Node]) -> list[tuple[Node, str]]:
    started = []
    for i in range(RUNS):
        node = nodes[i % len(nodes)]
        async with http.post(f"{node.url}/v1/agents/ops/runs", json={"input": f"task {i}"}) as r:
            body = await r.json()
            if r.status == 503:  # the cut came first: a clear refusal, nothing started
                assert body["error"]["code"] == "store_unavailable", body
                continue
            assert r.status == 202, body
            started.append((node, body["run_id"]))
    return started


async def run_answers(http: aiohttp.ClientSession, runs: list[tuple[Node, str]]) -> list[tuple[int, Any]]:
    answers = []
    for node, run_id in runs:
        async with http.get(f"{node.url}/v1/runs/{run_id}") as r:
            answers.append((r.status, await r.json()))
    return answers


def outage_lines(log: str) -> tuple[int, int]:
    return log.count("database unreachable since"), log.count("database reachable again")


@pytest.mark.parametrize(
    ("case", "needle"),
    [("a batch commit", b"COMMIT"), ("a fenced write", b"agentos_turn_fence"), ("the follow connection", b"LISTEN")],
)
async def test_a_cut_in_the_middle_is_store_unavailable_and_two_log_lines(
    case: str,
    needle: bytes,
    tmp_path: Path,
    mock_factory: Any,
    pg: StoreConfig,
    prefix: str,
    http: aiohttp.ClientSession,
) -> None:
    mock: MockServer = await mock_factory(ttft_ms=200, tps=50, tokens=10)  # ~0.4 s per turn
    target = urlsplit(pg.postgres_url)
    async with TcpProxy(target.hostname or "127.0.0.1", target.port or 5432) as proxy:
        proxied = target._replace(netloc=f"{target.username}@127.0.0.1:{proxy.port}").geturl()
        env = node_env(msgspec.structs.replace(pg, postgres_url=proxied), REDIS_URL, prefix)
        async with serve_nodes(2, tmp_path, mock.url, env) as nodes:
            async with http.post(f"{nodes[0].url}/v1/agents", json={"name": "ops", "tools": []}) as r:
                assert r.status == 201, await r.text()
            sessions = await asyncio.gather(*(new_session(http, nodes[i % 2].url) for i in range(2 * TURNS)))
            proxy.cut_when(needle)
            if needle == b"LISTEN":  # the followers listen from the start: make them connect (and LISTEN) again
                await proxy.cut()
                await proxy.restore()
            runs = await start_runs(http, nodes)
            first = asyncio.create_task(load(http, nodes, sessions[:TURNS]))
            await asyncio.wait_for(proxy.timed_cut.wait(), 30)  # cut at the moment `needle` was sent
            for node in nodes:
                await ready(http, node, 503)
            await proxy.restore()
            for node in nodes:
                await ready(http, node, 200)
            ended = await asyncio.wait_for(first, 60)  # every turn ends: none hangs
            second = await load(http, nodes, sessions[TURNS:])
            answers = await run_answers(http, runs)
    rows = await pg_rows(pg, "SELECT turn_id, role, status FROM messages")
    answered = {turn_id for turn_id, role, status in rows if role == "assistant" and status == "completed"}
    acknowledged = {turn_id for name, turn_id in ended + second if name == "turn.completed"}
    assert acknowledged - answered == set(), case  # 0 acknowledged answers lost
    kinds = {(name, detail if name != "turn.completed" else "") for name, detail in ended}
    assert kinds <= OK, (case, kinds)  # never internal_error
    assert [name for name, _ in second] == ["turn.completed"] * TURNS, case  # both nodes serve again
    for status, run in answers:
        assert status == 200 and run.get("reason") != "internal_error", (case, run)
    for name in ("node0", "node1"):
        log = (tmp_path / f"{name}.stderr").read_text()
        assert "Traceback" not in log and "pool connection floor" not in log, (case, log[-3000:])
        began, ended_lines = outage_lines(log)
        assert began == ended_lines, (case, name, log[-3000:])  # every outage logged as begun has ended
        # One outage, two lines; the follow case cuts twice (to make the followers LISTEN again,
        # then at their LISTEN), which the node may see as one outage, two, or (a CI machine at
        # three workers, once) three: a reconnect between the cuts failing too. Each is closed.
        assert began == 1 or (needle == b"LISTEN" and began <= 3), (case, name, log[-3000:])
