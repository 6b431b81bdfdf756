"""A real server with tracing on, exporting over OTLP/HTTP to a receiver on loopback: the spans
of a chat turn nest request -> turn -> chat call, continue a caller's trace, and the provider
receives the call's traceparent."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp

from agentos.config import settings_from_dict
from agentos.mock.server import MockServer, MockSettings, start_mock
from agentos.testing import RunningServer, start_server
from tests.telemetry.otlp_sink import OtlpSink, otlp_sink

CALLER = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
TURN_ROUTE = "POST /v1/sessions/{session_id}/turns"


@asynccontextmanager
async def traced_server(tmp_path: Any, **telemetry: Any) -> AsyncIterator[tuple[RunningServer, OtlpSink, MockServer]]:
    async with otlp_sink() as sink:
        mock = await start_mock(MockSettings(ttft_ms=1, tps=5000, tokens=3))
        tree = {
            "data_dir": str(tmp_path),
            "provider": {"url": mock.url},
            "telemetry": {"enabled": True, "endpoint": sink.url, "export_interval_s": 0.05, **telemetry},
        }
        server = await start_server(settings_from_dict(tree))
        try:
            yield server, sink, mock
        finally:
            await server.close()
            await mock.close()


async def _turn(http: aiohttp.ClientSession, url: str, headers: dict[str, str] | None = None) -> None:
    async with http.post(f"{url}/v1/sessions", json={}) as response:
        session_id = (await response.json())["id"]
    async with http.post(f"{url}/v1/sessions/{session_id}/turns", json={"input": "hi"}, headers=headers) as response:
        assert response.status == 200, await response.text()


async def test_a_chat_turn_is_one_trace_request_turn_chat(tmp_path: Any) -> None:
    async with traced_server(tmp_path) as (server, sink, _mock), aiohttp.ClientSession() as http:
        await _turn(http, server.url, {"traceparent": CALLER})
        spans = await sink.wait_for({TURN_ROUTE, "turn", "chat mock-1"})
    (request,) = sink.named(TURN_ROUTE)
    (turn,) = sink.named("turn")
    (chat,) = sink.named("chat mock-1")
    assert request.trace_id == turn.trace_id == chat.trace_id == CALLER.split("-")[1]
    assert request.parent_span_id == "b7ad6b7169203331"  # the caller's span
    assert turn.parent_span_id == request.span_id and chat.parent_span_id == turn.span_id
    assert request.attributes["http.response.status_code"] == 200
    assert turn.attributes["agentos.turn.outcome"] == "completed"
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    assert chat.attributes["gen_ai.usage.output_tokens"] == 3
    assert chat.attributes["agentos.target"] == "default/mock-1"
    assert "gen_ai.first_token" in chat.events
    assert request.resource["service.name"] == "agentos"
    assert not any(s.name.startswith("GET") for s in spans)  # reads start no work: untraced


async def test_a_callers_traceparent_is_refused_where_the_config_says(tmp_path: Any) -> None:
    async with traced_server(tmp_path, accept_traceparent="none") as (server, sink, _), aiohttp.ClientSession() as http:
        await _turn(http, server.url, {"traceparent": CALLER})
        await sink.wait_for({TURN_ROUTE})
    (request,) = sink.named(TURN_ROUTE)
    assert request.trace_id != CALLER.split("-")[1] and request.parent_span_id == ""
