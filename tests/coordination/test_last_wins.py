"""Last-wins across nodes: three real `agentos serve` processes on one PostgreSQL schema (and
one Redis), one bench mock with a long time to first token.

The turn epoch in PostgreSQL is the correctness (a superseded turn's writes are refused), the
cancel on the Redis bus the promptness (the old stream ends at once, its upstream aborted).
Real processes, real PostgreSQL (a fresh schema per test), real Redis (a key prefix per test).
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import pytest

from agentos.config import CoordinationConfig, StoreConfig
from agentos.coordination.bus import Bus
from agentos.mock.server import MockServer, start_mock
from agentos.mock.settings import MockSettings
from agentos.runtime.cluster import CHANNEL, CancelMessage
from tests.api.helpers import new_session, turn_events
from tests.conftest import REDIS_URL
from tests.coordination.cluster import node_env, pg_rows, serve_nodes

pytest.importorskip("asyncpg")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]

TTFT_MS = 3000  # turn 1 is still waiting for its first token when turn 2 arrives
QUICKLY_S = 1.5  # well under TTFT_MS: turn 1 ended because it was cancelled, not because it finished


@pytest.fixture
async def slow_mock(mock_factory: Any) -> MockServer:
    mock: MockServer = await mock_factory(ttft_ms=TTFT_MS, tps=200, tokens=3)
    return mock


async def transcript(pg: StoreConfig, session_id: str) -> list[tuple[int, str, str, str]]:
    sql = "SELECT message_id, turn_id, role, status FROM messages WHERE session_id = $1 ORDER BY message_id"
    return [tuple(row) for row in await pg_rows(pg, sql, session_id)]


async def test_a_turn_on_another_node_cancels_the_running_one_at_once(
    tmp_path: Path, slow_mock: MockServer, pg: StoreConfig, prefix: str, http: aiohttp.ClientSession
) -> None:
    heard: list[CancelMessage] = []
    listener = Bus(CoordinationConfig(redis_url=REDIS_URL, key_prefix=prefix))
    await listener.start()
    await listener.wait_connected()
    await listener.subscribe(CHANNEL, lambda data: heard.append(msgspec.msgpack.decode(data, type=CancelMessage)))
    async with serve_nodes(3, tmp_path, slow_mock.url, node_env(pg, REDIS_URL, prefix)) as (a, b, _):
        sid = await new_session(http, a.url)
        first = asyncio.create_task(turn_events(http, a.url, sid, "first"))
        await slow_mock.stats.wait_for(lambda s: s.requests == 1, what="turn 1 upstream")
        second = asyncio.create_task(turn_events(http, b.url, sid, "second"))
        events1 = await asyncio.wait_for(first, QUICKLY_S)  # long before its first token
        assert [e.name for e in events1] == ["turn.started", "turn.cancelled"]
        assert events1[-1].data["reason"] == "superseded"
        await slow_mock.stats.wait_for(lambda s: s.aborted == 1, what="turn 1's upstream request aborted")
        events2 = await second
        assert events2[-1].name == "turn.completed"
        rows = await transcript(pg, sid)
        async with http.get(f"{b.url}/v1/sessions/{sid}/events") as r:
            log = [(e["turn_id"], e["type"], e["data"].get("reason")) for e in (await r.json())["data"]]
        third = await turn_events(http, a.url, sid, "third")  # turn 2 has ended
        assert third[-1].name == "turn.completed"
    await listener.close()
    # Turns 1 and 3 found no turn running: only turn 2's start, which fenced turn 1 out, was announced.
    assert [(m.session_id, m.epoch, m.reason) for m in heard] == [(sid, 2, "superseded")]
    turn1, turn2 = events1[0].data["turn_id"], events2[0].data["turn_id"]
    # One terminal event per turn, turn 1's (written by turn 2's bump) first. Turn 1's own
    # turn.started is kept only if its batch committed before the bump: a race this test leaves open.
    assert [e for e in log if e != (turn1, "turn.started", None)] == [
        (turn1, "turn.cancelled", "superseded"),
        (turn2, "turn.started", None),
        (turn2, "turn.completed", None),
    ]
    assert [(t, role, status) for _, t, role, status in rows if t == turn2] == [
        (turn2, "user", "completed"),
        (turn2, "assistant", "completed"),
    ]
    first_of_turn2 = min(i for i, t, _, _ in rows if t == turn2)
    assert all(i < first_of_turn2 for i, t, _, _ in rows if t == turn1)  # nothing of turn 1 after turn 2 began
    assert not [r for r in rows if r[1] == turn1 and r[2] == "assistant"]  # its partial answer was never stored


async def test_without_redis_the_epoch_still_refuses_the_superseded_turn(
    tmp_path: Path, slow_mock: MockServer, pg: StoreConfig, http: aiohttp.ClientSession
) -> None:
    """No bus: node A never hears of turn 2. Turn 1 streams on until its answer is refused by
    PostgreSQL, then ends cancelled; the transcript is turn 2's."""
    async with serve_nodes(2, tmp_path, slow_mock.url, node_env(pg)) as (a, b):
        sid = await new_session(http, a.url)
        first = asyncio.create_task(turn_events(http, a.url, sid, "first"))
        await slow_mock.stats.wait_for(lambda s: s.requests == 1, what="turn 1 upstream")
        events2 = await turn_events(http, b.url, sid, "second")
        events1 = await first
        async with http.get(f"{a.url}/metrics") as r:
            metrics = await r.text()
        rows = await transcript(pg, sid)
    assert events2[-1].name == "turn.completed"
    assert [e.name for e in events1][-2:] == ["token", "turn.cancelled"]  # streamed, then refused
    assert events1[-1].data["reason"] == "superseded"
    stale = re.search(r"^agentos_stale_writes_rejected_total (\S+)$", metrics, re.M)
    assert stale is not None and float(stale.group(1)) >= 1
    turn1 = events1[0].data["turn_id"]
    assert not [r for r in rows if r[1] == turn1 and r[2] == "assistant"]
    assert [r[2] for r in rows if r[1] == events2[0].data["turn_id"]] == ["user", "assistant"]


async def test_a_cancel_sent_to_another_node_stops_the_turn(
    tmp_path: Path, slow_mock: MockServer, pg: StoreConfig, prefix: str, http: aiohttp.ClientSession
) -> None:
    async with serve_nodes(2, tmp_path, slow_mock.url, node_env(pg, REDIS_URL, prefix)) as (a, b):
        sid = await new_session(http, a.url)
        first = asyncio.create_task(turn_events(http, a.url, sid, "first"))
        await slow_mock.stats.wait_for(lambda s: s.requests == 1, what="turn 1 upstream")
        async with http.delete(f"{b.url}/v1/sessions/{sid}/turn") as r:
            assert r.status == 200
            answer = await r.json()
        events1 = await asyncio.wait_for(first, QUICKLY_S)
        await slow_mock.stats.wait_for(lambda s: s.aborted == 1, what="the upstream request aborted")
        async with http.delete(f"{b.url}/v1/sessions/{sid}/turn") as r:
            assert await r.json() == {"cancelled": False, "turn_id": None}  # nothing runs any more
    assert answer == {"cancelled": True, "turn_id": events1[0].data["turn_id"]}
    assert (events1[-1].name, events1[-1].data["reason"]) == ("turn.cancelled", "cancelled")


async def test_a_turn_on_node_b_sees_the_transcript_written_through_node_a(
    tmp_path: Path, pg: StoreConfig, prefix: str, http: aiohttp.ClientSession
) -> None:
    prompts: list[list[dict[str, Any]]] = []
    mock = await start_mock(MockSettings(ttft_ms=5, tps=2000, tokens=4), on_completed=prompts.append)
    try:
        async with serve_nodes(2, tmp_path, mock.url, node_env(pg, REDIS_URL, prefix)) as (a, b):
            sid = await new_session(http, a.url)
            assert (await turn_events(http, a.url, sid, "remember zebra"))[-1].name == "turn.completed"
            events = await turn_events(http, b.url, sid, "which animal?")
    finally:
        await mock.close()
    assert events[-1].name == "turn.completed"
    assert [(m["role"], m["content"]) for m in prompts[-1]] == [
        ("user", "remember zebra"),
        ("assistant", "tok tok tok tok "),
        ("user", "which animal?"),
    ]


async def test_a_node_that_still_holds_a_session_deleted_elsewhere_runs_no_turn_in_it(
    tmp_path: Path, mock: MockServer, pg: StoreConfig, http: aiohttp.ClientSession
) -> None:
    """Node A keeps the session in memory after node B deleted it: the epoch bump finds no row,
    so the turn ends cancelled without reaching the provider or writing a row."""
    async with serve_nodes(2, tmp_path, mock.url, node_env(pg)) as (a, b):
        sid = await new_session(http, a.url)
        assert (await turn_events(http, a.url, sid, "one"))[-1].name == "turn.completed"
        async with http.delete(f"{b.url}/v1/sessions/{sid}") as r:
            assert r.status == 204
        events = await turn_events(http, a.url, sid, "two")
        rows = await transcript(pg, sid)
    assert [(e.name, e.data.get("reason")) for e in events] == [("turn.cancelled", "session_deleted")]
    assert mock.stats.requests == 1 and rows == []
