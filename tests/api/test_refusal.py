"""A refused turn costs the server as little as it can (issue 14).

Over the gate, a turn POST is answered 429 from its headers alone: before its body is read, its
JSON decoded, its session looked up, with no store work for it but its access-log row (every
request has one). The real server, the real mock, real SQLite; the gate is filled by a turn
that waits a minute for its first token.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import aiohttp
import msgspec

from agentos.config import settings_from_dict
from agentos.mock.server import MockServer
from agentos.testing import RunningServer, start_server
from tests.api.helpers import SSE, new_session

_HALF_A_MEGABYTE = 512 * 1024  # under `server.max_body_bytes` (1 MiB): the old path waited for all of it


async def _raw_answer(server: RunningServer, head: str, body_part: bytes) -> tuple[int, dict[str, str], Any]:
    """Send a request head and only `body_part` of its body; the answer (status, headers, JSON)
    must come back all the same, the connection left open with the rest never sent."""
    host, port = server.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(head.encode() + body_part)
        async with asyncio.timeout(5):  # a server that reads the body would wait for the rest forever
            raw_head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            headers = dict(line.split(": ", 1) for line in raw_head[1:] if ": " in line)
            body = await reader.readexactly(int(headers["Content-Length"]))
    finally:
        writer.close()
    return int(raw_head[0].split()[1]), headers, msgspec.json.decode(body)


async def _fill_the_gate(
    server: RunningServer, mock: MockServer, http: aiohttp.ClientSession
) -> tuple[str, asyncio.Task[None]]:
    """A turn that holds the server's one slot (its first token is a minute away): its session, its task."""
    busy = await new_session(http, server.url)

    async def hold() -> None:
        async with http.post(f"{server.url}/v1/sessions/{busy}/turns", json={"input": "slow"}, headers=SSE) as r:
            await r.read()

    task = asyncio.create_task(hold())
    await mock.stats.wait_for(lambda s: s.in_flight == 1, what="the first turn to reach the provider")
    return busy, task


async def test_over_the_gate_a_turn_is_refused_before_its_body_is_read_and_leaves_only_its_access_row(
    tmp_path: Path, mock_factory, http: aiohttp.ClientSession
) -> None:
    mock: MockServer = await mock_factory(ttft_ms=60_000)
    settings = settings_from_dict(
        {"data_dir": str(tmp_path), "provider": {"url": mock.url}, "kernel": {"max_in_flight_turns": 1}}
    )
    server = await start_server(settings)
    try:
        busy, holder = await _fill_the_gate(server, mock, http)
        other = await new_session(http, server.url)
        for session_id in (other, "ses_nosuchsession"):  # over the gate, an unknown session is a 429 too
            head = (
                f"POST /v1/sessions/{session_id}/turns HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                f"Content-Type: application/json\r\nContent-Length: {_HALF_A_MEGABYTE}\r\n\r\n"
            )
            status, headers, body = await _raw_answer(server, head, b'{"input": "' + b"x" * 4096)
            assert status == 429 and headers["Retry-After"] == "1"
            assert body["error"]["code"] == "overloaded" and body["error"]["message"]
        stats = server.runtime.kernel.statistics()
        assert stats.rejected_total == 2 and stats.in_flight_turns == 1 and stats.admitted_total == 1
        assert mock.stats.requests == 1  # the refused turns never reached the provider
        server.runtime.cancel_turn("default", busy)
        await asyncio.wait_for(holder, 10)
    finally:
        await server.close()  # flushes every writer
    with sqlite3.connect(tmp_path / "sessions.db") as db:
        assert db.execute("SELECT COUNT(*) FROM messages WHERE session_id = ?", (other,)).fetchone() == (0,)
    with sqlite3.connect(tmp_path / "events.db") as db:
        assert db.execute("SELECT COUNT(*) FROM events WHERE session_id = ?", (other,)).fetchone() == (0,)
    with sqlite3.connect(tmp_path / "access.db") as db:
        rows = db.execute(
            "SELECT tenant_id, method, status FROM access_log WHERE path = ?", (f"/v1/sessions/{other}/turns",)
        )
        assert list(rows) == [("default", "POST", 429)]


async def test_over_the_gate_a_malformed_turn_is_a_429_and_under_it_a_400(
    tmp_path: Path, mock_factory, http: aiohttp.ClientSession
) -> None:
    """The order, stated in docs/api.md: the gate is asked before the body is read, so over it
    even a body that is not JSON gets the 429; with room, the same body is a 400."""
    mock: MockServer = await mock_factory(ttft_ms=60_000)
    settings = settings_from_dict(
        {"data_dir": str(tmp_path), "provider": {"url": mock.url}, "kernel": {"max_in_flight_turns": 1}}
    )
    server = await start_server(settings)
    try:
        other = await new_session(http, server.url)
        url = f"{server.url}/v1/sessions/{other}/turns"
        busy, holder = await _fill_the_gate(server, mock, http)
        async with http.post(url, data=b"{not json", headers={"Content-Type": "application/json"}) as r:
            assert r.status == 429 and (await r.json())["error"]["code"] == "overloaded"
        server.runtime.cancel_turn("default", busy)
        await asyncio.wait_for(holder, 10)
        async with http.post(url, data=b"{not json", headers={"Content-Type": "application/json"}) as r:
            assert r.status == 400 and (await r.json())["error"]["code"] == "malformed_json"
    finally:
        await server.close()


async def test_over_max_active_runs_a_run_is_refused_before_its_body_is_read(
    tmp_path: Path, mock_factory, http: aiohttp.ClientSession
) -> None:
    mock: MockServer = await mock_factory(ttft_ms=60_000)
    settings = settings_from_dict(
        {
            "data_dir": str(tmp_path),
            "provider": {"url": mock.url},
            "agents": {"slow": {"tools": []}},
            "kernel": {"max_active_runs": 1},
        }
    )
    server = await start_server(settings)
    try:
        async with http.post(f"{server.url}/v1/agents/slow/runs", json={"input": "one"}) as first:
            assert first.status == 202
            run_id = (await first.json())["run_id"]
        head = (
            "POST /v1/agents/slow/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Content-Type: application/json\r\nContent-Length: {_HALF_A_MEGABYTE}\r\n\r\n"
        )
        status, headers, body = await _raw_answer(server, head, b'{"input": "')
        assert status == 429 and headers["Retry-After"] == "1" and body["error"]["code"] == "overloaded"
        assert server.runtime.kernel.statistics().runs_rejected_total == 1
        async with http.post(f"{server.url}/v1/runs/{run_id}/terminate") as r:
            assert r.status == 200
    finally:
        await server.close()
