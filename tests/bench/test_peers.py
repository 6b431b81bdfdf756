"""Peers side by side: each peer's turn against a stub of its API (the peers are other projects,
not installed in CI), the report's account of a peer that is missing, and `--peers` parsing.

The opencode stub sends a turn's deltas on the event stream *after* the turn's answer, and the
previous turn's late deltas right before the next one, as a busy opencode does: a first token must
be matched to its own turn's message, never to the session's next delta.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from agentos.providers.sse_parser import SSEEvent
from agentos_bench.common.http import bench_http_session
from agentos_bench.peers.catalog import PEERS
from agentos_bench.peers.cli import peer_names
from agentos_bench.peers.launch import measure_peer, peers_status
from agentos_bench.peers.targets import (
    AgnoTarget,
    LangGraphTarget,
    OpencodeTarget,
    agno_verdict,
    langgraph_run_body,
    langgraph_verdict,
)
from agentos_bench.report.document import sweep_markdown
from agentos_bench.report.overhead import overhead_rows
from agentos_bench.report.peers_table import peers_section


def _agno_frames(terminal: str) -> list[bytes]:
    names = ["RunStarted", "RunContent", "RunContent", terminal]
    return [f'event: {name}\ndata: {{"event": "{name}"}}\n\n'.encode() for name in names]


async def _agno_run(request: web.Request) -> web.StreamResponse:
    form = await request.post()
    terminal = "RunError" if form["message"] == "fail" else "RunCompleted"
    assert form["stream"] == "true" and str(form["session_id"]).startswith("bench-")
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for frame in _agno_frames(terminal):
        await response.write(frame)
        await asyncio.sleep(0.01)
    return response


async def _deleted(request: web.Request) -> web.Response:
    return web.Response(status=204)


@pytest.fixture
async def agno_stub() -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_post("/agents/bench/runs", _agno_run)
    app.router.add_delete("/sessions/{id}", _deleted)
    async with TestServer(app, host="127.0.0.1") as server:
        yield str(server.make_url("")).rstrip("/")


@pytest.mark.parametrize(("message", "failure"), [("hello", None), ("fail", "turn_failed")])
async def test_agno_turn_is_timed_from_its_stream(agno_stub: str, message: str, failure: str | None) -> None:
    target = AgnoTarget(agno_stub, turn_input=message)
    async with bench_http_session() as http:
        worker = await target.open_worker(http)
        sample = await target.turn(http, worker, timeout_s=5.0)
        await target.close_worker(http, worker)
    assert sample.failure == failure
    assert sample.ttft_s is not None and 0.01 <= sample.ttft_s < sample.turn_s


def test_agno_verdicts() -> None:
    assert agno_verdict(SSEEvent(event="RunContent", data="{}")) == "first"
    assert agno_verdict(SSEEvent(event="RunCompleted", data="{}")) == "ok"
    assert agno_verdict(SSEEvent(event="RunCancelled", data="{}")) == "cancelled"
    assert agno_verdict(SSEEvent(event="ModelRequestStarted", data="{}")) is None


def _delta(message: str) -> bytes:
    event = {"type": "message.part.delta", "properties": {"sessionID": "s1", "messageID": message, "delta": "x"}}
    return b"data: " + msgspec.json.encode(event) + b"\n\n"


class _Opencode:
    """Turn n answers message m<n> after 0.05 s; its three deltas reach the event stream 0.15, 0.25 and
    0.35 s after the request, so the last two arrive during the next turn."""

    def __init__(self) -> None:
        self.ids = itertools.count(1)
        self.events: asyncio.Queue[bytes] = asyncio.Queue()

    async def session(self, request: web.Request) -> web.Response:
        return web.json_response({"id": "s1"})

    async def message(self, request: web.Request) -> web.Response:
        message = f"m{next(self.ids)}"
        for delay in (0.15, 0.25, 0.35):
            asyncio.get_running_loop().call_later(delay, self.events.put_nowait, _delta(message))
        await asyncio.sleep(0.05)
        return web.json_response({"info": {"id": message, "time": {"completed": 1}}, "parts": []})

    async def event(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b'data: {"type":"server.connected","properties":{}}\n\n')
        while True:
            await response.write(await self.events.get())


async def test_opencode_first_token_is_its_own_messages_even_when_the_events_trail() -> None:
    stub = _Opencode()
    app = web.Application()
    app.router.add_post("/session", stub.session)
    app.router.add_post("/session/{id}/message", stub.message)
    app.router.add_get("/event", stub.event)
    async with TestServer(app, host="127.0.0.1") as server, bench_http_session() as http:
        target = OpencodeTarget(str(server.make_url("")).rstrip("/"))
        await target.start(http)
        worker = await target.open_worker(http)
        samples = [await target.turn(http, worker, timeout_s=5.0) for _ in range(3)]
        await target.stop()
    for sample in samples:  # the answer came at 0.05 s, its delta at 0.15 s: never the previous turn's
        assert sample.ok and sample.ttft_s is not None and sample.ttft_s >= 0.14


def _langgraph_frame(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: ".encode() + msgspec.json.encode(data) + b"\n\n"


def _langgraph_token_data(content: str) -> str:  # as langgraph-api 0.16 sends a messages-tuple event
    chunk = {"content": content, "type": "AIMessageChunk", "id": "lc_run--1", "tool_calls": [], "tool_call_chunks": []}
    return msgspec.json.encode([chunk, {"langgraph_node": "answer", "thread_id": "t1"}]).decode()


def _langgraph_token(content: str) -> bytes:
    return f"event: messages\ndata: {_langgraph_token_data(content)}\n\n".encode()


class _LangGraph:
    """A run: metadata, the input state, an empty chunk, then at 0.1 s three tokens and the final
    state; a thread whose input says "fail" gets an `error` event instead of tokens."""

    def __init__(self) -> None:
        self.bodies: list[Any] = []
        self.deleted: list[str] = []

    async def thread(self, request: web.Request) -> web.Response:
        return web.json_response({"thread_id": "t1", "status": "idle"})

    async def run(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.bodies.append(body)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(_langgraph_frame("metadata", {"run_id": "r1", "attempt": 1}))
        await response.write(_langgraph_frame("values", body["input"]) + _langgraph_token(""))
        await asyncio.sleep(0.1)
        if body["input"]["messages"][0]["content"] == "fail":
            await response.write(_langgraph_frame("error", {"error": "APIConnectionError", "message": "x"}))
            return response
        for _ in range(3):
            await response.write(_langgraph_token("tok "))
            await asyncio.sleep(0.02)
        await response.write(_langgraph_frame("values", {"messages": [*body["input"]["messages"], {"type": "ai"}]}))
        return response

    async def delete(self, request: web.Request) -> web.Response:
        self.deleted.append(request.match_info["id"])
        return web.Response(status=204)


@pytest.mark.parametrize(("message", "failure"), [("hello", None), ("fail", "turn_failed")])
async def test_langgraph_turn_is_a_streamed_run_on_the_workers_thread(message: str, failure: str | None) -> None:
    stub = _LangGraph()
    app = web.Application()
    app.router.add_post("/threads", stub.thread)
    app.router.add_post("/threads/{id}/runs/stream", stub.run)
    app.router.add_delete("/threads/{id}", stub.delete)
    async with TestServer(app, host="127.0.0.1") as server, bench_http_session() as http:
        target = LangGraphTarget(str(server.make_url("")).rstrip("/"), turn_input=message)
        worker = await target.open_worker(http)
        sample = await target.turn(http, worker, timeout_s=5.0)
        await target.close_worker(http, worker)
    assert (worker, stub.deleted, sample.failure) == ("t1", ["t1"], failure)
    assert stub.bodies[0]["assistant_id"] == "bench" and "messages-tuple" in stub.bodies[0]["stream_mode"]
    if failure is None:  # the empty chunk before the tokens is not the first token; the end waits for them
        assert sample.ttft_s is not None and 0.1 <= sample.ttft_s < sample.turn_s and sample.turn_s >= 0.16
    else:
        assert sample.ttft_s is None


def test_langgraph_verdicts() -> None:
    token, empty = (SSEEvent(event="messages", data=_langgraph_token_data(text)) for text in ("a", ""))
    values = SSEEvent(event="values", data='{"messages": []}')
    tool = SSEEvent(event="messages", data='[{"content": "", "tool_call_chunks": [{"name": "f"}]}, {}]')
    blocks = SSEEvent(event="messages", data='[{"content": [{"type": "text", "text": "a"}]}, {}]')
    verdicts = [langgraph_verdict(event) for event in (token, tool, blocks, empty, values)]
    assert verdicts == ["first", "first", "first", None, None]
    assert langgraph_verdict(values, seen_first=True) == "ok" and langgraph_verdict(token, seen_first=True) is None
    assert langgraph_verdict(SSEEvent(event="error", data='{"error": "x"}'), seen_first=True) == "turn_failed"
    assert langgraph_verdict(SSEEvent(event="metadata", data='{"run_id": "r"}')) is None


def test_langgraph_run_body() -> None:
    body = msgspec.json.decode(langgraph_run_body("hi", "g"))
    assert body == {
        "assistant_id": "g",
        "input": {"messages": [{"role": "user", "content": "hi"}]},
        "stream_mode": ["messages-tuple", "values"],
    }


async def test_a_missing_peer_is_not_measured_and_says_how_to_install(tmp_path: Path) -> None:
    async def never(target: Any, pid: int) -> None:
        raise AssertionError("a missing peer must not be measured")

    async with bench_http_session() as http:
        entry = await measure_peer("agno", tmp_path, "http://127.0.0.1:9/v1", tmp_path, http, never)
    assert (entry["measured"], entry["version"]) == (False, None)
    section = "\n".join(peers_section([entry]))
    assert "not measured (not installed in" in section and f"python3 -m venv {tmp_path / 'agno'}" in section
    assert {p["name"] for p in peers_status(tmp_path)} == {"agno", "opencode", "langgraph"} == set(PEERS)


async def test_a_missing_langgraph_names_its_install_command(tmp_path: Path) -> None:
    async def never(target: Any, pid: int) -> None:
        raise AssertionError("a missing peer must not be measured")

    (tmp_path / "langgraph").mkdir()  # a directory without the venv is not an install
    async with bench_http_session() as http:
        entry = await measure_peer("langgraph", tmp_path, "http://127.0.0.1:9/v1", tmp_path, http, never)
    section = "\n".join(peers_section([entry]))
    assert "LangGraph Server (`langgraph`)" in section and f"python3 -m venv {tmp_path / 'langgraph'}" in section
    assert (
        f"{tmp_path / 'langgraph'}/bin/pip install langgraph-api==" in section and "langgraph-cli[inmem]==" in section
    )


def test_langgraph_starts_its_dev_server_on_a_graph_file_it_writes(tmp_path: Path) -> None:
    launch = PEERS["langgraph"].launch(tmp_path / "peers", "http://127.0.0.1:9/v1", 4321, tmp_path)
    config = msgspec.json.decode((launch.cwd / "langgraph.json").read_bytes())
    module, _, name = config["graphs"]["bench"].partition(":")
    assert Path(module).is_file() and name == "graph" and launch.cwd.is_relative_to(tmp_path)
    assert launch.argv[:2] == [str(tmp_path / "peers" / "langgraph" / "bin" / "langgraph"), "dev"]
    assert {"--no-reload", "--no-browser"} <= set(launch.argv) and launch.argv[
        launch.argv.index("--port") + 1
    ] == "4321"
    assert launch.env["AGENTOS_BENCH_MOCK_URL"] == "http://127.0.0.1:9/v1" and launch.ready_path == "/ok"


def test_peer_rows_are_set_against_the_direct_row() -> None:
    def row(target: str, profile: str | None, ttft: float) -> dict[str, Any]:
        pcts = {"p50": ttft, "p95": None, "p99": None, "n": 10}
        return {
            "target": target,
            "profile": profile,
            "concurrency": 1,
            "turns_per_s": 2.0,
            "turns_ok": 10,
            "ttft_ms": pcts,
            "turn_ms": pcts,
            "failures": {},
        }

    rows = [row("direct", None, 200.0), row("server", "no-store", 203.0), row("agno", "peer:agno", 260.0)]
    overhead = {o["profile"]: o["ttft_ms"]["p50"] for o in overhead_rows(rows)}
    assert overhead == {"no-store": 3.0, "peer:agno": 60.0}
    report = {
        "profiles": ["no-store"],
        "created_utc": "2026-12-01T00:00:00",
        "rows": rows,
        "window": {"warmup_s": 1, "duration_s": 1},
        "machine": {"cpu": "c", "cores": 2, "ram_gib": 1, "os": "l"},
        "versions": {},
        "topology": "t",
        "mock": {},
        "command": "c",
    }
    assert "### peer `agno`" in sweep_markdown(report, {})


def test_peer_names_are_checked() -> None:
    assert peer_names("agno, opencode") == ["agno", "opencode"]
    assert peer_names("") == []
    assert peer_names("langgraph") == ["langgraph"]
    with pytest.raises(SystemExit, match="no adapter for crewai"):
        peer_names("agno,crewai")
