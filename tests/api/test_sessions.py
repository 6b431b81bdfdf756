"""Sessions: CRUD, TTL eviction and reload, restart, WebSocket, auth, metrics."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import msgspec

from agentos.mock.server import MockServer
from agentos.testing import FakeClock, RunningServer, sse_events, start_server
from tests.api.helpers import SSE, assert_documented, new_session, turn_events
from tests.conftest import make_settings


async def test_session_crud_and_pagination(server: RunningServer, http: aiohttp.ClientSession) -> None:
    ids = sorted([await new_session(http, server.url, metadata={"user": i}) for i in range(5)])
    async with http.get(f"{server.url}/v1/sessions/{ids[0]}") as r:
        session = await r.json()
    assert session["agent"] is None and session["tenant_id"] == "default" and session["active_turn"] is None
    async with http.get(f"{server.url}/v1/sessions", params={"limit": "2"}) as r:
        page = await r.json()
    seen = [s["id"] for s in page["data"]]
    while page["next_cursor"]:
        async with http.get(f"{server.url}/v1/sessions", params={"limit": "2", "after": page["next_cursor"]}) as r:
            page = await r.json()
        seen += [s["id"] for s in page["data"]]
    assert seen == ids
    async with http.delete(f"{server.url}/v1/sessions/{ids[0]}") as r:
        assert r.status == 204
    async with http.post(f"{server.url}/v1/sessions", json={"agent": "nobody"}) as r:
        assert r.status == 404 and "nobody" in (await r.json())["error"]["message"]
    async with http.get(f"{server.url}/v1/sessions/{ids[0]}") as r:
        assert r.status == 404


async def test_a_session_without_an_agent_reports_what_runs_its_turns(tmp_path: Path, mock, http) -> None:
    """null while no agent is named "default" (plain chat turns), "default" once one is: in the
    answer to POST, in GET and in the list, and after a restart from the same SQLite file."""
    settings = make_settings(tmp_path / "data", mock.url)
    server = await start_server(settings)
    try:
        async with http.post(f"{server.url}/v1/sessions", json={}) as r:
            plain = await r.json()
        assert r.status == 201 and plain["agent"] is None
        assert_documented(plain, "Session")
        async with http.post(f"{server.url}/v1/sessions", json={"agent": None}) as r:
            assert (await r.json())["agent"] is None
        async with http.post(f"{server.url}/v1/agents", json={"name": "default", "tools": []}) as r:
            assert r.status == 201
        async with http.post(f"{server.url}/v1/sessions") as r:  # no body at all
            agented = await r.json()
        assert agented["agent"] == "default"
        # Opened before the agent existed, it keeps plain chat turns while in memory, and says so.
        assert (await _session(http, server, plain["id"]))["agent"] is None
        assert (await _session(http, server, agented["id"]))["agent"] == "default"
        async with http.get(f"{server.url}/v1/sessions") as r:
            listed = {s["id"]: s["agent"] for s in (await r.json())["data"]}
        assert listed[plain["id"]] is None and listed[agented["id"]] == "default"
    finally:
        await server.close()
    # The API-made agent outlives the restart: every session without an agent of its own runs it.
    again = await start_server(settings)
    try:
        for sid in (plain["id"], agented["id"]):
            assert (await _session(http, again, sid))["agent"] == "default"
    finally:
        await again.close()


async def _session(http: aiohttp.ClientSession, server: RunningServer, sid: str) -> dict[str, Any]:
    async with http.get(f"{server.url}/v1/sessions/{sid}") as r:
        assert r.status == 200, await r.text()
        session: dict[str, Any] = await r.json()
    assert_documented(session, "Session")
    return session


async def test_idle_sessions_leave_memory_and_come_back(server_factory, mock, http) -> None:
    clock = FakeClock()
    server: RunningServer = await server_factory(mock.url, clock, **{"kernel.session_ttl_secs": 60})
    sid = await new_session(http, server.url)
    first = await turn_events(http, server.url, sid, "one two three")
    assert await server.runtime.wait_idle(5.0)  # the turn has ended: the session's idle time starts now
    clock.advance(59.9)
    server.runtime.tick()
    assert server.runtime.kernel.has_session(sid)  # not before its TTL
    clock.advance(0.1)
    server.runtime.tick()
    assert not server.runtime.kernel.has_session(sid)
    assert server.runtime.kernel.statistics().evicted_total == 1
    second = await turn_events(http, server.url, sid, "four")  # brought back from the store
    assert second[-1].name == "turn.completed"
    assert second[-1].data["usage"]["prompt_tokens"] > first[-1].data["usage"]["prompt_tokens"]


async def test_without_a_store_an_evicted_session_is_gone(server_factory, mock, http) -> None:
    clock = FakeClock()
    server: RunningServer = await server_factory(
        mock.url, clock, **{"kernel.session_ttl_secs": 60, "store.enabled": False}
    )
    sid = await new_session(http, server.url)
    assert (await turn_events(http, server.url, sid))[-1].name == "turn.completed"
    assert await server.runtime.wait_idle(5.0)
    clock.advance(60)
    server.runtime.tick()
    assert not server.runtime.kernel.has_session(sid)
    async with http.post(f"{server.url}/v1/sessions/{sid}/turns", json={"input": "x"}) as r:
        assert r.status == 404


async def test_the_transcript_survives_a_restart(tmp_path: Path, mock: MockServer, http) -> None:
    settings = make_settings(tmp_path / "data", mock.url)
    first = await start_server(settings)
    sid = await new_session(http, first.url)
    await turn_events(http, first.url, sid, "remember me")
    await first.close()
    second = await start_server(settings)
    try:
        async with http.get(f"{second.url}/v1/sessions/{sid}/messages") as r:
            messages = (await r.json())["data"]
        assert [m["content"] for m in messages] == ["remember me", "tok tok tok tok "]
        async with http.get(f"{second.url}/v1/sessions/{sid}/events") as r:
            assert [e["type"] for e in (await r.json())["data"]] == ["turn.started", "turn.completed"]
        assert (await turn_events(http, second.url, sid))[-1].name == "turn.completed"
    finally:
        await second.close()
    assert (tmp_path / "data" / "access.db").exists()


async def test_the_websocket_streams_turns_and_cancels(server_factory, mock_factory, http) -> None:
    mock: MockServer = await mock_factory(ttft_ms=5, tps=20, tokens=100)
    server: RunningServer = await server_factory(mock.url)
    sid = await new_session(http, server.url)
    async with http.ws_connect(f"{server.url}/v1/sessions/{sid}/ws") as ws:
        await ws.send_json({"type": "turn", "input": "hello"})
        frames = [await ws.receive_json(timeout=5) for _ in range(2)]
        assert [f["type"] for f in frames] == ["turn.started", "token"]
        await ws.send_json({"type": "cancel"})
        while (frame := await ws.receive_json(timeout=5))["type"] == "token":
            pass
        assert frame["type"] == "turn.cancelled" and frame["data"]["reason"] == "cancelled"
        await ws.send_str("not json")
        assert (await ws.receive_json(timeout=5))["error"]["code"] == "malformed_json"
        await ws.send_json({"type": "dance"})
        assert (await ws.receive_json(timeout=5))["error"]["code"] == "invalid_input"


async def test_closing_the_websocket_cancels_its_turn(server_factory, mock_factory, http) -> None:
    mock: MockServer = await mock_factory(ttft_ms=5, tps=20, tokens=100)
    server: RunningServer = await server_factory(mock.url)
    sid = await new_session(http, server.url)
    async with http.ws_connect(f"{server.url}/v1/sessions/{sid}/ws") as ws:
        await ws.send_json({"type": "turn", "input": "hello"})
        while (await ws.receive_json(timeout=5))["type"] != "token":
            pass
    assert await server.runtime.wait_idle(5.0), "the turn did not end"
    await mock.stats.wait_for(lambda s: s.aborted == 1, what="the upstream abort")


async def test_a_websocket_turn_completes(server: RunningServer, http) -> None:
    sid = await new_session(http, server.url)
    async with http.ws_connect(f"{server.url}/v1/sessions/{sid}/ws") as ws:
        await ws.send_json({"type": "turn", "input": "hello"})
        frames: list[dict[str, Any]] = []
        while not frames or frames[-1]["type"] != "turn.completed":
            frames.append(await ws.receive_json(timeout=5))
    assert [f["type"] for f in frames].count("token") == 4


async def test_a_bearer_token_guards_everything_but_health(server_factory, mock, http) -> None:
    server: RunningServer = await server_factory(mock.url, **{"server.api_token": "s3cret"})
    async with http.post(f"{server.url}/v1/sessions") as r:
        assert r.status == 401 and (await r.json())["error"]["code"] == "unauthorized"
    async with http.post(f"{server.url}/v1/sessions", headers={"Authorization": "Bearer wrong"}) as r:
        assert r.status == 401
    async with http.post(f"{server.url}/v1/sessions", headers={"Authorization": "Bearer s3cret"}) as r:
        assert r.status == 201
    for path in ("/healthz", "/readyz"):
        async with http.get(server.url + path) as r:
            assert r.status == 200


async def test_metrics_carry_every_documented_name(server: RunningServer, http) -> None:
    sid = await new_session(http, server.url)
    await turn_events(http, server.url, sid)
    async with http.get(f"{server.url}/metrics") as r:
        text = await r.text()
    for name in [
        "agentos_in_flight_turns",
        "agentos_admission_limit",
        "agentos_admission_rejected_total",
        "agentos_active_sessions",
        "agentos_active_processes",
        "agentos_event_db_write_wait_ms_bucket",
        "agentos_message_store_queue",
        "agentos_access_log_queue",
        "agentos_event_db_dropped_total",
        "agentos_turn_duration_ms_bucket",
        "agentos_ttft_ms_bucket",
        "agentos_tokens_prompt_total",
        "agentos_tokens_completion_total",
        "agentos_connections_closed_total",
    ]:
        assert f"\n{name}" in text, name
    assert "agentos_tokens_completion_total 4.0" in text
    assert "agentos_active_sessions 1.0" in text
    assert 'agentos_connections_closed_total{reason="header_timeout"} 0.0' in text


async def test_readyz_reports_draining(server: RunningServer, http) -> None:
    async with http.get(f"{server.url}/readyz") as r:
        assert r.status == 200
    await server.services.drain(1.0)
    async with http.get(f"{server.url}/readyz") as r:
        assert r.status == 503
    sid = await new_session(http, server.url)
    async with http.post(f"{server.url}/v1/sessions/{sid}/turns", json={"input": "x"}) as r:
        assert r.status == 503 and (await r.json())["error"]["code"] == "shutting_down"
        assert r.headers["Retry-After"] == "1"


async def test_the_jsonl_log_records_events(tmp_path: Path, mock: MockServer, http) -> None:
    settings = make_settings(tmp_path / "data", mock.url, jsonl_dir=str(tmp_path / "jsonl"))
    server = await start_server(settings)
    sid = await new_session(http, server.url)
    await turn_events(http, server.url, sid)
    await server.close()
    lines = b"".join(p.read_bytes() for p in (tmp_path / "jsonl").glob("*.jsonl")).splitlines()
    assert [msgspec.json.decode(line)["type"] for line in lines] == ["turn.started", "turn.completed"]


async def test_concurrent_sessions_are_independent(server: RunningServer, http) -> None:
    sessions = [await new_session(http, server.url) for _ in range(20)]
    results = await asyncio.gather(*(turn_events(http, server.url, s) for s in sessions))
    assert all(r[-1].name == "turn.completed" for r in results)


async def test_deleting_a_session_mid_turn_cancels_it_and_leaves_nothing(server_factory, mock_factory, http) -> None:
    mock: MockServer = await mock_factory(ttft_ms=5, tps=20, tokens=100)
    server: RunningServer = await server_factory(mock.url)
    sid = await new_session(http, server.url)
    events = []
    async with http.post(f"{server.url}/v1/sessions/{sid}/turns", json={"input": "x"}, headers=SSE) as r:
        async for event in sse_events(r):
            events.append(event)
            if event.name == "token":
                async with http.delete(f"{server.url}/v1/sessions/{sid}") as d:
                    assert d.status == 204
    assert events[-1].name == "turn.cancelled" and events[-1].data["reason"] == "session_deleted"
    assert await server.runtime.store.list_messages("default", sid, after=0, limit=10) == []
    async with http.get(f"{server.url}/v1/sessions/{sid}/messages") as r:
        assert r.status == 404
