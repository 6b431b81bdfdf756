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
    traced = traced_server(tmp_path, slow_commit_ms=0)  # every answer commit gets its span
    async with traced as (server, sink, _mock), aiohttp.ClientSession() as http:
        await _turn(http, server.url, {"traceparent": CALLER})
        spans = await sink.wait_for({TURN_ROUTE, "turn", "chat mock-1", "agentos.store.commit"})
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
    (commit,) = sink.named("agentos.store.commit")
    assert commit.parent_span_id == turn.span_id
    assert request.resource["service.name"] == "agentos"
    assert not any(s.name.startswith("GET") for s in spans)  # reads start no work: untraced
    assert server.services.tracing.statistics()["exported"] >= 4


async def test_a_callers_tracestate_is_carried_exported_and_passed_to_the_provider(tmp_path: Any) -> None:
    """W3C Trace Context: the caller's tracestate goes with its trace, on every span under its
    request (OTLP `trace_state`) and beside the traceparent of the provider call."""
    state = "rojo=00f067aa0ba902b7, congo=t61rcWkgMzE"
    async with traced_server(tmp_path) as (server, sink, mock), aiohttp.ClientSession() as http:
        await _turn(http, server.url, {"traceparent": CALLER, "tracestate": state})
        sent = dict(mock.trace_context)
        await sink.wait_for({TURN_ROUTE, "turn", "chat mock-1"})
        await _turn(http, server.url, {"traceparent": CALLER, "tracestate": "rojo=1,Bad Key=2"})  # malformed
        malformed = dict(mock.trace_context)
        await _turn(http, server.url, {"tracestate": state})  # without a traceparent: means nothing
        alone = dict(mock.trace_context)
        await eventually_count(sink, "chat mock-1", 3)
    (chat, *_) = [s for s in sink.named("chat mock-1") if s.span_id == sent["traceparent"].split("-")[2]]
    assert sent["tracestate"] == "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"
    (request, *_) = sink.named(TURN_ROUTE)
    (turn, *_) = sink.named("turn")
    assert request.trace_state == turn.trace_state == chat.trace_state == sent["tracestate"]
    assert "tracestate" not in malformed and malformed["traceparent"].split("-")[1] == CALLER.split("-")[1]
    assert "tracestate" not in alone
    assert all(s.trace_state == "" for s in sink.spans if s.trace_id != CALLER.split("-")[1])


async def test_a_callers_traceparent_is_refused_where_the_config_says(tmp_path: Any) -> None:
    async with traced_server(tmp_path, accept_traceparent="none") as (server, sink, _), aiohttp.ClientSession() as http:
        await _turn(http, server.url, {"traceparent": CALLER})
        await sink.wait_for({TURN_ROUTE})
    (request,) = sink.named(TURN_ROUTE)
    assert request.trace_id != CALLER.split("-")[1] and request.parent_span_id == ""


async def test_an_agent_run_is_a_trace_of_its_own_linked_from_its_request(tmp_path: Any) -> None:
    from agentos.telemetry import derived_ids

    async with otlp_sink() as sink:
        mock = await start_mock(MockSettings(scenario="tools", ttft_ms=1, tps=5000, tokens=3))
        agents = {"ops": {"tools": ["run_command", "ask_human"], "command": {"timeout_s": 10}}}
        tree = {
            "data_dir": str(tmp_path),
            "provider": {"url": mock.url},
            "agents": agents,
            "telemetry": {"enabled": True, "endpoint": sink.url, "export_interval_s": 0.05},
        }
        server = await start_server(settings_from_dict(tree))
        try:
            async with aiohttp.ClientSession() as http:
                async with http.post(f"{server.url}/v1/agents/ops/runs", json={"input": "go"}) as response:
                    assert response.status == 202, await response.text()
                    run_id = (await response.json())["run_id"]
                await sink.wait_for({"execute_tool run_command"})
                pending = await _wait_pending(http, server.url, run_id)
                body = {"operation_id": pending["operation_id"], "answer": "forty-two"}
                async with http.post(f"{server.url}/v1/runs/{run_id}/answer", json=body) as response:
                    assert response.status in (200, 202), await response.text()
                await sink.wait_for({"invoke_agent ops", "human_wait question"})
        finally:
            await server.close()
            await mock.close()
    trace_id, root_id = derived_ids(run_id)
    (root,) = sink.named("invoke_agent ops")
    assert (root.trace_id, root.span_id, root.parent_span_id) == (trace_id, root_id, "")
    assert root.attributes["agentos.run.status"] == "completed"
    in_run = [s for s in sink.spans if s.trace_id == trace_id]
    tools = [s for s in in_run if s.name == "execute_tool run_command"]
    chats = [s for s in in_run if s.name == "chat mock-1"]
    assert len(tools) == 2 and all(t.parent_span_id == root_id for t in tools)
    assert all(t.attributes["process.exit.code"] == 0 for t in tools)
    assert len(chats) >= 3 and all(c.parent_span_id == root_id for c in chats)
    (wait,) = sink.named("human_wait question")
    assert wait.trace_id == trace_id and wait.parent_span_id == root_id
    assert wait.events == ["agentos.human.requested", "agentos.human.answered"]
    (request,) = sink.named("POST /v1/agents/{name}/runs")
    assert request.trace_id != trace_id and (trace_id, root_id) in request.links


async def _wait_pending(http: aiohttp.ClientSession, url: str, run_id: str) -> dict[str, Any]:
    from agentos.testing import eventually

    found: dict[str, Any] = {}

    async def waiting() -> bool:
        async with http.get(f"{url}/v1/runs/{run_id}") as response:
            info = await response.json()
        if info["status"] == "waiting_human" and info.get("pending"):
            found.update(info["pending"])
            return True
        return False

    await eventually(waiting, 10, "the run to ask its question")
    return found


async def test_a_signed_delivery_joins_the_senders_trace_and_links_its_run(tmp_path: Any) -> None:
    from agentos.telemetry import derived_ids
    from tests.triggers.webhooks import Sender, create_trigger, run_outcome, serve

    async with otlp_sink() as sink:
        mock = await start_mock(MockSettings(ttft_ms=1, tps=5000, tokens=3))
        telemetry = {"enabled": True, "endpoint": sink.url, "export_interval_s": 0.05}
        server = await serve(tmp_path / "data", mock, {}, telemetry=telemetry)
        try:
            async with aiohttp.ClientSession() as http:
                created = await create_trigger(http, server.url)
                sender = Sender(http, server.url, created["trigger_id"], created["secret"])
                forged = Sender(http, server.url, created["trigger_id"], "whsec_" + "A" * 44)
                forged_parent = "00-11111111111111111111111111111111-2222222222222222-01"
                assert (await forged.send({"n": 1}, headers={"traceparent": forged_parent})).status == 401
                answer = await sender.send({"n": 1}, headers={"traceparent": CALLER, "tracestate": "rojo=1"})
                run_id = answer.body["run_id"]
                assert await run_outcome(http, server.url, run_id) == "run.completed"
                await sink.wait_for({"agentos.trigger.delivery", "invoke_agent echo"})
        finally:
            await server.close()
            await mock.close()
    (delivery,) = sink.named("agentos.trigger.delivery")
    assert delivery.trace_id == CALLER.split("-")[1] and delivery.parent_span_id == "b7ad6b7169203331"
    assert delivery.trace_state == "rojo=1"  # the sender's, with its trace
    assert derived_ids(run_id) in delivery.links
    assert not any(s.trace_id == "1" * 32 for s in sink.spans)  # a forged delivery writes into no trace


async def test_the_access_log_names_each_requests_trace(tmp_path: Any) -> None:
    import sqlite3

    async with traced_server(tmp_path) as (server, sink, _), aiohttp.ClientSession() as http:
        await _turn(http, server.url, {"traceparent": CALLER})
        await sink.wait_for({TURN_ROUTE})
    db = sqlite3.connect(tmp_path / "access.db")  # the server closed: its access log is flushed
    try:
        rows = db.execute("SELECT method, trace_id FROM access_log WHERE path LIKE '%/turns'").fetchall()
    finally:
        db.close()
    assert rows == [("POST", CALLER.split("-")[1])]


async def test_content_is_recorded_only_for_the_tenants_the_administrator_names(tmp_path: Any) -> None:
    async with traced_server(tmp_path, capture_content=["default"], content_max_chars=40) as (server, sink, _):
        async with aiohttp.ClientSession() as http:
            await _turn(http, server.url)
        await sink.wait_for({"chat mock-1"})
    (chat,) = sink.named("chat mock-1")
    assert chat.attributes["gen_ai.input.messages"].startswith('[{"role":"user","content":"hi"}')
    assert chat.attributes["gen_ai.output.messages"].startswith('[{"role":"assistant"')
    assert len(chat.attributes["gen_ai.output.messages"]) <= 40 + len("...[truncated]")


async def test_no_content_is_recorded_by_default(tmp_path: Any) -> None:
    async with traced_server(tmp_path) as (server, sink, _), aiohttp.ClientSession() as http:
        await _turn(http, server.url)
        await sink.wait_for({"chat mock-1"})
    (chat,) = sink.named("chat mock-1")
    assert not any(key.startswith(("gen_ai.input", "gen_ai.output")) for key in chat.attributes)


async def test_a_fast_answer_commit_costs_no_span(tmp_path: Any) -> None:
    traced = traced_server(tmp_path, slow_commit_ms=60_000)  # no commit is that slow
    async with traced as (server, sink, _mock), aiohttp.ClientSession() as http:
        await _turn(http, server.url)
        await sink.wait_for({TURN_ROUTE, "turn", "chat mock-1"})
    assert sink.named("agentos.store.commit") == []


async def test_a_hostile_traceparent_is_ignored_never_an_error(tmp_path: Any) -> None:
    hostile = ["garbage", "00-" + "0" * 32 + "-b7ad6b7169203331-01", CALLER.upper(), "00-" + "a" * 5000, CALLER + "-00"]
    async with traced_server(tmp_path) as (server, sink, _), aiohttp.ClientSession() as http:
        for value in hostile:
            await _turn(http, server.url, {"traceparent": value})  # each answered 200 (asserted in _turn)
        await sink.wait_for({TURN_ROUTE})
        await eventually_count(sink, TURN_ROUTE, len(hostile))
    requests = sink.named(TURN_ROUTE)
    assert len({r.trace_id for r in requests}) == len(hostile)  # each a trace of its own
    assert all(r.parent_span_id == "" for r in requests)  # none continued what it claimed


async def eventually_count(sink: OtlpSink, name: str, count: int) -> None:
    from agentos.testing import eventually

    await eventually(lambda: len(sink.named(name)) >= count, 10, f"{count} spans named {name}")


async def test_the_exporters_counters_are_on_metrics(tmp_path: Any) -> None:
    async with traced_server(tmp_path) as (server, sink, _), aiohttp.ClientSession() as http:
        await _turn(http, server.url)
        await sink.wait_for({TURN_ROUTE})
        async with http.get(f"{server.url}/metrics") as response:
            text = await response.text()
    for name in ("exported", "dropped", "failed"):
        assert f"agentos_trace_spans_{name}_total" in text
    assert "agentos_trace_queue" in text
    assert "agentos_trace_attribute_values_dropped_total 0.0" in text
