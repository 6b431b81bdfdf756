"""`on_busy` across nodes: two real `agentos serve` processes on one PostgreSQL schema and one
Redis, one bench mock slow to its first token. The session's turn runs on node A; the second
message goes to node B. replace and rollback fence A's turn out; reject names it (409); enqueue
and steer are sent to A, whose kernel queues or steers them, and B streams them from there
(docs/conversations.md, "Across nodes"). A steer of a run on A sent to B reaches the run too."""

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
from agentos.testing import sse_events
from tests.api.helpers import SSE, new_session, turn_events
from tests.api.test_websocket import ended, receive_until
from tests.conftest import REDIS_URL
from tests.coordination.cluster import node_env, pg_rows, serve_nodes

pytest.importorskip("asyncpg")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

_QUIET_S = 3.0  # coordination.forward_quiet_s for the node-lost test (the default 15 s, shortened)

AGENTS = """
[agents.ops]
tools = ["run_command", "ask_human"]
command = { timeout_s = 10 }
"""


@pytest.fixture
async def slow_mock(mock_factory: Any) -> MockServer:
    mock: MockServer = await mock_factory(ttft_ms=2000, tps=200, tokens=3)
    return mock


@asynccontextmanager
async def busy_on_a(
    tmp_path: Path, mock: MockServer, pg: StoreConfig, prefix: str, http: aiohttp.ClientSession, **env: str
) -> AsyncIterator[tuple[str, str, asyncio.Task[list[Any]]]]:
    """Two nodes; a session whose turn "first" runs on node A, waiting for its first token.
    Yields node B's URL, the session and the task of that turn's events."""
    async with serve_nodes(2, tmp_path, mock.url, node_env(pg, REDIS_URL, prefix) | env) as (a, b):
        sid = await new_session(http, a.url)
        first = asyncio.create_task(turn_events(http, a.url, sid, "first"))
        await mock.stats.wait_for(lambda s: s.requests == 1, what="turn 1 upstream")
        yield b.url, sid, first


async def post_turn(http: aiohttp.ClientSession, url: str, sid: str, text: str, on_busy: str) -> tuple[int, Any]:
    async with http.post(f"{url}/v1/sessions/{sid}/turns", json={"input": text, "on_busy": on_busy}) as r:
        return r.status, await r.json()


async def stream_turn(
    http: aiohttp.ClientSession,
    url: str,
    sid: str,
    text: str,
    on_busy: str,
    first: asyncio.Event | None = None,
    events: list[Any] | None = None,
) -> list[Any]:
    """The turn's events (also into `events` as they come); `first` is set once its first event
    came (a queued turn: it is queued)."""
    body = {"input": text, "on_busy": on_busy}
    events = [] if events is None else events
    async with http.post(f"{url}/v1/sessions/{sid}/turns", json=body, headers=SSE) as r:
        assert r.status == 200, await r.text()
        async for event in sse_events(r):
            events.append(event)
            if first is not None:
                first.set()
    return events


async def transcript(pg: StoreConfig, sid: str) -> list[tuple[str, str]]:
    sql = "SELECT role, content FROM messages WHERE session_id = $1 ORDER BY message_id"
    return [(row[0], row[1]) for row in await pg_rows(pg, sql, sid)]


async def test_reject_names_the_turn_running_on_another_node(
    tmp_path: Path, slow_mock: MockServer, pg: StoreConfig, prefix: str, http: aiohttp.ClientSession
) -> None:
    async with busy_on_a(tmp_path, slow_mock, pg, prefix, http) as (b_url, sid, first):
        status, body = await post_turn(http, b_url, sid, "x", "reject")
        assert status == 409 and body["error"]["code"] == "turn_in_progress"
        events = await first
        assert events[-1].name == "turn.completed"  # untouched by the refused one
        assert body["error"]["turn_id"] == events[0].data["turn_id"]
        status, body = await post_turn(http, b_url, sid, "y", "reject")
        assert body["status"] == "completed"  # idle everywhere now: it runs
    assert slow_mock.stats.requests == 2


async def test_replace_on_another_node_supersedes_the_running_turn(
    tmp_path: Path, slow_mock: MockServer, pg: StoreConfig, prefix: str, http: aiohttp.ClientSession
) -> None:
    async with busy_on_a(tmp_path, slow_mock, pg, prefix, http) as (b_url, sid, first):
        status, body = await post_turn(http, b_url, sid, "second", "replace")
        assert status == 200 and body["status"] == "completed"
        events = await first
        assert events[-1].name == "turn.cancelled" and events[-1].data["reason"] == "superseded"
    assert [row for row in await transcript(pg, sid) if row[0] == "user"] == [("user", "first"), ("user", "second")]


async def test_enqueue_on_another_node_runs_after_the_running_turn_within_its_bound(
    tmp_path: Path, slow_mock: MockServer, pg: StoreConfig, prefix: str, http: aiohttp.ClientSession
) -> None:
    """B's turn waits in A's queue (bound 1): it says so, runs once "first" completed, and streams
    its tokens to B's client; a second one over the bound is refused 429 with Retry-After."""
    bound = {"AGENTOS_KERNEL_MAX_QUEUED_TURNS_PER_SESSION": "1"}
    async with busy_on_a(tmp_path, slow_mock, pg, prefix, http, **bound) as (b_url, sid, first):
        in_queue = asyncio.Event()
        queued = asyncio.create_task(stream_turn(http, b_url, sid, "second", "enqueue", in_queue))
        await asyncio.wait_for(in_queue.wait(), 10)
        async with http.post(f"{b_url}/v1/sessions/{sid}/turns", json={"input": "third", "on_busy": "enqueue"}) as r:
            assert r.status == 429, await r.text()
            assert (await r.json())["error"]["code"] == "turn_queue_full" and int(r.headers["Retry-After"]) >= 1
        events = await queued
        first_events = await first
        async with http.get(f"{b_url}/metrics") as r:
            b_metrics = await r.text()
    names = [e.name for e in events]
    assert names[0] == "turn.queued" and names[-1] == "turn.completed", names
    assert "agentos_turn_forwarding_asked_total 2.0" in b_metrics  # "second" and "third" went to A
    assert "token" in names[names.index("turn.started") :]  # tokens reach B's client live
    assert first_events[-1].name == "turn.completed"  # never fenced out by the queued turn
    assert [row for row in await transcript(pg, sid) if row[0] == "user"] == [("user", "first"), ("user", "second")]
    assert [row[0] for row in await transcript(pg, sid)] == ["user", "assistant", "user", "assistant"]


async def test_enqueue_over_a_websocket_on_another_node(
    tmp_path: Path, slow_mock: MockServer, pg: StoreConfig, prefix: str, http: aiohttp.ClientSession
) -> None:
    """The same through a WebSocket on B: the frames of the turn A queued and runs, in order."""
    async with busy_on_a(tmp_path, slow_mock, pg, prefix, http) as (b_url, sid, first):
        async with http.ws_connect(f"{b_url}/v1/sessions/{sid}/ws") as ws:
            await ws.send_json({"type": "turn", "input": "second", "on_busy": "enqueue"})
            frames = await receive_until(ws, ended(1))
        first_events = await first
    names = [f["type"] for f in frames]
    assert names[0] == "turn.queued" and names[-1] == "turn.completed", names
    assert "token" in names[names.index("turn.started") :]
    assert first_events[-1].name == "turn.completed"


async def test_a_turn_queued_on_another_node_is_cancelled_by_id_from_any_node(
    tmp_path: Path, slow_mock: MockServer, pg: StoreConfig, prefix: str, http: aiohttp.ClientSession
) -> None:
    """DELETE .../turns/{turn_id} on B reaches the turn queued on A: it leaves A's queue, its
    stream on B ends `turn.cancelled`, and "first" runs on untouched; it wrote no message."""
    async with busy_on_a(tmp_path, slow_mock, pg, prefix, http) as (b_url, sid, first):
        in_queue = asyncio.Event()
        events: list[Any] = []
        queued = asyncio.create_task(stream_turn(http, b_url, sid, "second", "enqueue", in_queue, events))
        await asyncio.wait_for(in_queue.wait(), 10)
        turn_id = events[0].data["turn_id"]
        async with http.delete(f"{b_url}/v1/sessions/{sid}/turns/{turn_id}") as r:
            assert r.status == 200 and (await r.json()) == {"cancelled": True, "turn_id": turn_id}
        await asyncio.wait_for(queued, 10)
        first_events = await first
    assert [e.name for e in events] == ["turn.queued", "turn.cancelled"]
    assert events[-1].data["reason"] == "cancelled"
    assert first_events[-1].name == "turn.completed"
    assert [row[1] for row in await transcript(pg, sid) if row[0] == "user"] == ["first"]
    assert slow_mock.stats.requests == 1


async def test_a_client_of_another_node_that_leaves_cancels_its_queued_turn(
    tmp_path: Path, slow_mock: MockServer, pg: StoreConfig, prefix: str, http: aiohttp.ClientSession
) -> None:
    """The client of B's enqueued turn goes away: the turn leaves A's queue (as a local turn's
    client leaving cancels it), and "first" runs on untouched."""
    async with busy_on_a(tmp_path, slow_mock, pg, prefix, http) as (b_url, sid, first):
        in_queue = asyncio.Event()
        events: list[Any] = []
        queued = asyncio.create_task(stream_turn(http, b_url, sid, "second", "enqueue", in_queue, events))
        await asyncio.wait_for(in_queue.wait(), 10)
        queued.cancel()  # the connection closes with the task
        await asyncio.gather(queued, return_exceptions=True)
        turn_id = events[0].data["turn_id"]
        async with http.get(f"{b_url}/v1/sessions/{sid}/turns/{turn_id}/events", headers=SSE) as r:
            followed = [e async for e in sse_events(r)]
        first_events = await first
    assert [e.name for e in followed] == ["turn.queued", "turn.cancelled"]
    assert first_events[-1].name == "turn.completed"
    assert slow_mock.stats.requests == 1


async def test_a_turn_queued_on_a_node_that_dies_ends_node_lost(
    tmp_path: Path, mock_factory: Any, pg: StoreConfig, prefix: str, http: aiohttp.ClientSession
) -> None:
    """Kill -9 of the node holding B's queued turn: B's client is told `node_lost` once the turn
    was quiet for `coordination.forward_quiet_s` and no node says it lives, instead of waiting
    for ever."""
    mock: MockServer = await mock_factory(ttft_ms=60_000, tps=200, tokens=3)  # "first" never ends
    env = node_env(pg, REDIS_URL, prefix) | {"AGENTOS_COORDINATION_FORWARD_QUIET_S": str(_QUIET_S)}
    async with serve_nodes(2, tmp_path, mock.url, env) as (a, b):
        sid = await new_session(http, a.url)
        first = asyncio.create_task(turn_events(http, a.url, sid, "first"))
        await mock.stats.wait_for(lambda s: s.requests == 1, what="turn 1 upstream")
        in_queue = asyncio.Event()
        queued = asyncio.create_task(stream_turn(http, b.url, sid, "second", "enqueue", in_queue))
        await asyncio.wait_for(in_queue.wait(), 10)
        await a.kill()
        events = await asyncio.wait_for(queued, _QUIET_S + 15)
        first.cancel()
        await asyncio.gather(first, return_exceptions=True)  # its node is gone: no answer to wait for
    assert [e.name for e in events] == ["turn.queued", "turn.failed"]
    assert events[-1].data["reason"] == "node_lost"


@asynccontextmanager
async def agent_nodes(tmp_path: Path, mock: MockServer, pg: StoreConfig, prefix: str) -> AsyncIterator[tuple[str, str]]:
    config = tmp_path / "agentos.toml"
    config.write_text(AGENTS)
    env = node_env(pg, REDIS_URL, prefix)
    async with serve_nodes(2, tmp_path, mock.url, env, ["--config", str(config)]) as (a, b):
        yield a.url, b.url


async def test_steer_on_another_node_joins_the_agent_turn_running_there(
    tmp_path: Path, mock_factory: Any, pg: StoreConfig, prefix: str, http: aiohttp.ClientSession
) -> None:
    """The agent turn runs on A (its first model call slow); B's steer is handed to A's kernel,
    which delivers it to the run at its next step: A's stream shows `turn.steered`, B's request
    ends `turn.completed` with `steered_into`, and the message is in the transcript once."""
    mock: MockServer = await mock_factory(scenario="light", ttft_ms=1500, tps=500, tokens=3)
    async with agent_nodes(tmp_path, mock, pg, prefix) as (a_url, b_url):
        sid = await new_session(http, a_url, agent="ops")
        first = asyncio.create_task(turn_events(http, a_url, sid, "build it"))
        await mock.stats.wait_for(lambda s: s.requests == 1, what="the agent's first model call")
        status, steered = await post_turn(http, b_url, sid, "and use blue", "steer")
        events = await first
    assert status == 200 and steered["status"] == "completed", steered
    assert steered["steered_into"] == events[0].data["turn_id"]
    names = [e.name for e in events]
    assert names.count("turn.steered") == 1 and names[-1] == "turn.completed", names
    assert [e.data["input"] for e in events if e.name == "turn.steered"] == ["and use blue"]
    users = [content for role, content in await transcript(pg, sid) if role == "user"]
    assert users == ["build it", "and use blue"]
    assert mock.stats.requests == 4  # the run's own calls (1, then 3 after the steer): none of the steer's


async def test_a_run_steered_through_another_node_journals_the_message_once(
    tmp_path: Path, mock_factory: Any, pg: StoreConfig, prefix: str, http: aiohttp.ClientSession
) -> None:
    """`POST /v1/runs/{id}/steer` on B for a run A works: B leaves it for A, whose run takes it
    in at its next step; B answers with that journal step, and the run's events show it once."""
    mock: MockServer = await mock_factory(scenario="light", ttft_ms=1500, tps=500, tokens=3)
    async with agent_nodes(tmp_path, mock, pg, prefix) as (a_url, b_url):
        async with http.post(f"{a_url}/v1/agents/ops/runs", json={"input": "build it"}) as r:
            assert r.status == 202, await r.text()
            run_id = (await r.json())["run_id"]
        await mock.stats.wait_for(lambda s: s.requests == 1, what="the run's first model call")
        async with http.post(f"{b_url}/v1/runs/{run_id}/steer", json={"input": "use blue"}) as r:
            assert r.status == 200, await r.text()
            steered = await r.json()
        again = await _replay_the_last_steer_request(pg, run_id)  # as if A died before answering it
        async with http.get(f"{a_url}/v1/runs/{run_id}/events", headers=SSE) as r:
            events = [e async for e in sse_events(r)]
        async with http.post(f"{b_url}/v1/runs/{run_id}/steer", json={"input": "too late"}) as r:
            assert r.status == 409 and (await r.json())["error"]["code"] == "run_not_working"
    assert steered["run_id"] == run_id and isinstance(steered["seq"], int)
    assert again == {"status": 200, "seq": steered["seq"]}  # answered from the journal, not taken twice
    assert [(e.data["input"], e.data["seq"]) for e in events if e.name == "run.steered"] == [
        ("use blue", steered["seq"])
    ]
    assert events[-1].name == "run.completed"
    rows = await pg_rows(pg, "SELECT count(*) FROM steps WHERE run_id = $1 AND kind = 'user'", run_id)
    assert rows[0][0] == 1


async def _replay_the_last_steer_request(pg: StoreConfig, run_id: str) -> dict[str, Any]:
    """Put the run's last steer request back as if its owner had died after journaling it and
    before answering (the row stays for the next owner), wake the owner, and return its outcome."""
    import asyncpg
    import msgspec

    from agentos.store.pg_pool import channel

    conn = await asyncpg.connect(pg.postgres_url, server_settings={"search_path": pg.postgres_schema})
    try:
        # The one request of this test so far: the steer, whose row its sender deleted on reading it.
        sequence = await conn.fetchval("SELECT pg_get_serial_sequence('run_requests', 'id')")
        request_id = await conn.fetchval(f"SELECT last_value FROM {sequence}")
        await conn.execute(
            "INSERT INTO run_requests (id, tenant_id, run_id, body, created_ms) OVERRIDING SYSTEM VALUE"
            " VALUES ($1, 'default', $2, $3::jsonb, 0)",
            request_id,
            run_id,
            '{"kind": "steer", "input": "use blue"}',
        )
        await conn.execute("SELECT pg_notify($1, $2)", channel("agentos_run_requests", pg.postgres_schema), run_id)
        for _ in range(200):  # 20 s at most
            outcome = await conn.fetchval("SELECT outcome FROM run_requests WHERE id = $1", request_id)
            if outcome is not None:
                break
            await asyncio.sleep(0.1)  # another process's row: read it again
        assert outcome is not None, "the owner answered the request"
        await conn.execute("DELETE FROM run_requests WHERE id = $1", request_id)
        return dict(msgspec.json.decode(outcome))
    finally:
        await conn.close()
