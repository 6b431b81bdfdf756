"""Traces read back from a real trace store: Arize Phoenix on loopback (tests/telemetry/phoenix.py).

What the exporter sends, Phoenix decodes, stores in its database and answers over its REST API:
these tests prove the spans survive that whole way with their ids, parents, names, attributes,
events and errors. Phoenix does not store span links (nor the span kind, nor resource
attributes): those are proven on the wire, against tests/telemetry/otlp_sink.py.

All in this one file: `--dist loadfile` runs them in one worker, so one Phoenix (started once,
12-40 s) serves them all. Kept few: each costs a real server and a poll of Phoenix.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agentos.config import settings_from_dict
from agentos.config.telemetry import TelemetryConfig
from agentos.mock.server import MockServer, MockSettings, start_mock
from agentos.telemetry.otel import OtelTracing
from agentos.testing import RunningServer, sse_events, start_server
from tests.telemetry.phoenix import Phoenix

# The first test waits for Phoenix to start (tests/telemetry/conftest.py): up to 150 s of setup.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(200)]

CALLER_SPAN = "00f067aa0ba902b7"  # the caller's span, in the caller's process
TURN_ROUTE = "POST /v1/sessions/{session_id}/turns"


def new_trace() -> tuple[str, str]:
    """A trace id of the caller's, new in every test (one Phoenix serves them all), and the
    traceparent that carries it."""
    trace_id = secrets.token_hex(16)
    return trace_id, f"00-{trace_id}-{CALLER_SPAN}-01"


def span_id_of(traceparent: str) -> str:
    return traceparent.split("-")[2]


async def test_the_tracer_s_spans_are_stored_with_their_ids_parents_events_and_errors(
    phoenix: Phoenix, http: aiohttp.ClientSession
) -> None:
    caller_trace, caller = new_trace()
    tracing = OtelTracing(
        TelemetryConfig(enabled=True, endpoint=phoenix.otlp_endpoint, export_interval_s=0.05), node="node-1"
    )
    try:
        with tracing.span("POST /v1/things", {"http.request.method": "POST"}, kind="server", parent=caller) as request:
            turn_attributes = {"agentos.turn.id": "t1", "agentos.attempt": 2, "agentos.live": True}
            with (
                tracing.span("turn", turn_attributes) as turn,
                tracing.span("chat m1", {"gen_ai.operation.name": "chat"}, kind="client") as chat,
            ):
                chat.add_event("gen_ai.first_token", {"agentos.ttft_ms": 12.5})
                chat.set_attribute("gen_ai.response.finish_reasons", ["stop"])
            follower = tracing.start("turn", {"agentos.turn.id": "t2"}, links=[turn.traceparent])
            follower.end()
            with pytest.raises(ValueError), tracing.span("execute_tool run_command"):
                raise ValueError("exit 3")
    finally:
        await asyncio.to_thread(tracing.shutdown)  # drains the queue to Phoenix
    assert tracing.statistics()["failed"] == 0

    stored = await phoenix.trace(http, caller_trace, at_least=5)
    assert stored.names() == sorted(["POST /v1/things", "turn", "turn", "chat m1", "execute_tool run_command"])
    server = stored.one("POST /v1/things")
    assert server.span_id == span_id_of(request.traceparent) and server.parent_id == CALLER_SPAN  # the caller's
    assert stored.parent(server) is None  # the caller's span is in the caller's process, not here
    first = next(s for s in stored.named("turn") if s.attributes["agentos.turn.id"] == "t1")
    assert first.span_id == span_id_of(turn.traceparent) and first.parent_id == server.span_id
    assert first.attributes == {"agentos.turn.id": "t1", "agentos.attempt": 2, "agentos.live": True}
    chat_span = stored.one("chat m1")
    assert chat_span.span_id == span_id_of(chat.traceparent) and stored.parent(chat_span) == first
    assert chat_span.event("gen_ai.first_token").attributes == {"agentos.ttft_ms": 12.5}
    assert chat_span.attributes["gen_ai.response.finish_reasons"] == ["stop"]
    assert chat_span.attributes["llm.finish_reason"] == "stop"  # Phoenix's own, derived from gen_ai.*
    second = next(s for s in stored.named("turn") if s.attributes["agentos.turn.id"] == "t2")
    assert second.span_id == span_id_of(follower.traceparent) and second.parent_id == server.span_id
    tool = stored.one("execute_tool run_command")
    assert tool.status == "ERROR" and tool.status_message == "exit 3"
    assert tool.attributes["error.type"] == "ValueError"
    assert tool.event("exception").attributes["exception.message"] == "exit 3"
    assert server.status == first.status == "UNSET"


# --- a real server --------------------------------------------------------------------------


@asynccontextmanager
async def traced_server(phoenix: Phoenix, data_dir: Path, tree: dict[str, Any]) -> AsyncIterator[RunningServer]:
    """A real server, tracing on, exporting to Phoenix; closed (its last spans flushed) after."""
    telemetry = {"enabled": True, "endpoint": phoenix.otlp_endpoint, "export_interval_s": 0.05}
    server = await start_server(settings_from_dict({"data_dir": str(data_dir), "telemetry": telemetry, **tree}))
    try:
        yield server
    finally:
        await server.close()


async def new_session(http: aiohttp.ClientSession, url: str) -> str:
    async with http.post(f"{url}/v1/sessions", json={}) as response:
        assert response.status == 201, await response.text()
        session_id: str = (await response.json())["id"]
        return session_id


async def chat_turn(http: aiohttp.ClientSession, url: str, session_id: str, headers: dict[str, str]) -> None:
    async with http.post(f"{url}/v1/sessions/{session_id}/turns", json={"input": "hi"}, headers=headers) as r:
        assert r.status == 200, await r.text()
        assert (await r.json())["status"] == "completed"


async def test_a_chat_turn_is_stored_as_request_turn_chat(
    phoenix: Phoenix, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    caller_trace, caller = new_trace()
    mock = await start_mock(MockSettings(ttft_ms=1, tps=5000, tokens=3))
    try:
        async with traced_server(phoenix, tmp_path, {"provider": {"url": mock.url}}) as server:
            session_id = await new_session(http, server.url)
            await chat_turn(http, server.url, session_id, {"traceparent": caller})
            await chat_turn(http, server.url, session_id, {})  # no caller: a trace of its own
    finally:
        await mock.close()

    stored = await phoenix.trace(http, caller_trace, at_least=3)
    assert stored.names() == sorted([TURN_ROUTE, "turn", "chat mock-1"])
    assert stored.edges() == {(TURN_ROUTE, "turn"), ("turn", "chat mock-1")}
    request, turn, chat = stored.one(TURN_ROUTE), stored.one("turn"), stored.one("chat mock-1")
    assert request.parent_id == CALLER_SPAN  # continues the caller's trace
    assert request.attributes["http.route"] == "/v1/sessions/{session_id}/turns"
    assert request.attributes["http.response.status_code"] == 200
    assert turn.attributes["agentos.session.id"] == session_id == turn.attributes["gen_ai.conversation.id"]
    assert turn.attributes["agentos.turn.outcome"] == "completed"
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    assert chat.attributes["gen_ai.request.model"] == "mock-1"
    assert chat.attributes["gen_ai.usage.output_tokens"] == 3
    assert chat.attributes["agentos.target"] == "default/mock-1"
    assert chat.event("gen_ai.first_token").attributes["agentos.target"] == "default/mock-1"
    assert "agentos.fallback" not in chat.event_names

    # the second turn, sent without a traceparent, began a trace of its own
    turns = await phoenix.spans_where(http, name="turn", attributes={"agentos.session.id": session_id}, at_least=2)
    (own,) = [s for s in turns if s.trace_id != caller_trace]
    other = await phoenix.trace(http, own.trace_id, at_least=3)
    assert other.edges() == {(TURN_ROUTE, "turn"), ("turn", "chat mock-1")}
    assert other.one(TURN_ROUTE).parent_id is None  # the root


async def test_a_fallback_between_targets_is_stored_on_the_chat_span(
    phoenix: Phoenix, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    caller_trace, caller = new_trace()
    bad = await start_mock(MockSettings(ttft_ms=1))
    good = await start_mock(MockSettings(ttft_ms=1, tps=5000, tokens=2))
    bad.set_faults(error_rate=1.0)  # every call to the first target: 500 before its first token
    tree = {
        "providers": {
            name: {"url": mock.url, "max_retries": 0, "first_token_timeout_s": 5.0}
            for name, mock in (("first", bad), ("second", good))
        },
        "models": {"smart": {"targets": [{"provider": "first", "model": "m1"}, {"provider": "second", "model": "m2"}]}},
    }
    try:
        async with traced_server(phoenix, tmp_path, tree) as server:
            session_id = await new_session(http, server.url)
            await chat_turn(http, server.url, session_id, {"traceparent": caller})
    finally:
        await bad.close()
        await good.close()

    stored = await phoenix.trace(http, caller_trace, at_least=3)
    assert stored.edges() == {(TURN_ROUTE, "turn"), ("turn", "chat smart")}  # one chat span for the call
    chat = stored.one("chat smart")
    fallback = chat.event("agentos.fallback").attributes
    assert fallback == {"agentos.target": "first/m1", "error.type": "provider_http_error"}
    assert chat.event("gen_ai.first_token").attributes["agentos.target"] == "second/m2"
    assert chat.event_names.index("agentos.fallback") < chat.event_names.index("gen_ai.first_token")
    assert chat.attributes["agentos.target"] == "second/m2" and chat.attributes["gen_ai.response.model"] == "m2"
    assert chat.status == "UNSET" and stored.one("turn").attributes["agentos.turn.outcome"] == "completed"


async def test_a_turn_superseded_by_last_wins_is_stored_cancelled_in_its_own_trace(
    phoenix: Phoenix, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    mock: MockServer = await start_mock(MockSettings(ttft_ms=5, tps=200, tokens=2000))  # 10 s: long enough to catch
    (first_trace, first_caller), (second_trace, second_caller) = new_trace(), new_trace()
    try:
        async with traced_server(phoenix, tmp_path, {"provider": {"url": mock.url}}) as server:
            session_id = await new_session(http, server.url)
            url = f"{server.url}/v1/sessions/{session_id}/turns"
            headers = {"Accept": "text/event-stream", "traceparent": first_caller}
            async with http.post(url, json={"input": "one"}, headers=headers) as first:
                events = sse_events(first)
                async for event in events:  # the first turn is streaming: now supersede it
                    if event.name == "token":
                        break
                await chat_turn(http, server.url, session_id, {"traceparent": second_caller})
                names = [e.name async for e in events]
            assert names[-1] == "turn.cancelled"
    finally:
        await mock.close()

    superseded = await phoenix.trace(http, first_trace, at_least=3)
    successor = await phoenix.trace(http, second_trace, at_least=3)
    turn = superseded.one("turn")
    assert turn.attributes["agentos.turn.outcome"] == "cancelled"
    assert turn.attributes["agentos.turn.reason"] == "superseded"
    assert turn.status != "ERROR"  # superseded is not a failure
    assert successor.one("turn").attributes["agentos.turn.outcome"] == "completed"
    assert superseded.edges() == successor.edges() == {(TURN_ROUTE, "turn"), ("turn", "chat mock-1")}
    # The turn's span link to its successor's request (`agentos.link = superseded_by`) is sent
    # (tests/telemetry/test_server_traces.py reads it on the wire) but Phoenix 20.26.1 stores no
    # links: nothing here can read it back.
