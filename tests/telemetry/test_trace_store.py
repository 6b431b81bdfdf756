"""Traces read back from a real trace store: Arize Phoenix on loopback (tests/telemetry/phoenix.py).

What the exporter sends, Phoenix decodes, stores in its database and answers over its REST API:
these tests prove the spans survive that whole way with their ids, parents, names, attributes,
events and errors: spans of the tracer alone; of a chat turn; of a fallback between targets; of
a turn superseded by last-wins; of an agent run with two sandboxed commands, two approvals and a
question; of a delegation; of a webhook delivery in its sender's trace; of a run resumed after
kill -9. Phoenix does not store span links (nor the span kind, nor resource attributes): those
are proven on the wire, against tests/telemetry/otlp_sink.py (test_server_traces.py).

All in this one file: `--dist loadfile` runs them in one worker, so one Phoenix (started once,
9-48 s measured) serves them all. Kept few: each costs a real server and a poll of Phoenix.
"""

from __future__ import annotations

import asyncio
import secrets
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agentos.config import settings_from_dict
from agentos.config.telemetry import TelemetryConfig
from agentos.mock.server import MockServer, MockSettings, start_mock
from agentos.providers.base import ChatRequest, Completion
from agentos.services import open_services
from agentos.telemetry import derived_ids
from agentos.telemetry.opening import open_tracing
from agentos.testing import RunningServer, eventually, serve_services, sse_events, start_server
from tests.agents.fakes import ScriptedProvider, answer, call, tool_messages_since_user
from tests.conftest import child_env
from tests.telemetry.phoenix import REPO, Phoenix, StoredTrace

# The first test waits for Phoenix to start (tests/telemetry/conftest.py): up to 150 s of setup.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(200)]

CALLER_SPAN = "00f067aa0ba902b7"  # the caller's span, in the caller's process
TURN_ROUTE = "POST /v1/sessions/{session_id}/turns"
COMMIT = "agentos.store.commit"  # the answer's write, the one the client waits on
PERMIT = "agentos.provider_permit"  # only when the turn waited for its provider permit


def turn_tree(model: str) -> set[tuple[str, str]]:
    """The (parent, child) names of a completed chat turn's trace (docs/observability.md)."""
    return {(TURN_ROUTE, "turn"), ("turn", f"chat {model}"), ("turn", COMMIT)}


def shape(stored: StoredTrace) -> set[tuple[str, str]]:
    """The trace's edges, less the permit wait that a loaded machine may add."""
    return stored.edges() - {("turn", PERMIT)}


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
    tracing = open_tracing(
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
    # slow_commit_ms 0: every answer commit gets its span (by default only a slow one does)
    telemetry = {"enabled": True, "endpoint": phoenix.otlp_endpoint, "export_interval_s": 0.05, "slow_commit_ms": 0}
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

    stored = await phoenix.trace(http, caller_trace, at_least=4)
    assert shape(stored) == turn_tree("mock-1")
    request, turn, chat = stored.one(TURN_ROUTE), stored.one("turn"), stored.one("chat mock-1")
    assert request.parent_id == CALLER_SPAN  # continues the caller's trace
    assert request.attributes["http.route"] == "/v1/sessions/{session_id}/turns"
    assert request.attributes["http.response.status_code"] == 200
    assert turn.attributes["gen_ai.conversation.id"] == session_id
    assert turn.attributes["agentos.turn.outcome"] == "completed"
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    assert chat.attributes["gen_ai.request.model"] == "mock-1"
    assert chat.attributes["gen_ai.usage.output_tokens"] == 3
    assert chat.attributes["agentos.target"] == "default/mock-1"
    assert chat.event("gen_ai.first_token").attributes["agentos.target"] == "default/mock-1"
    assert "agentos.fallback" not in chat.event_names

    # the second turn, sent without a traceparent, began a trace of its own
    turns = await phoenix.spans_where(http, name="turn", attributes={"gen_ai.conversation.id": session_id}, at_least=2)
    (own,) = [s for s in turns if s.trace_id != caller_trace]
    other = await phoenix.trace(http, own.trace_id, at_least=4)
    assert shape(other) == turn_tree("mock-1")
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

    stored = await phoenix.trace(http, caller_trace, at_least=4)
    assert shape(stored) == turn_tree("smart")  # one chat span for the call, both targets in it
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
    mock: MockServer = await start_mock(MockSettings(ttft_ms=1, tps=5000, tokens=3))
    mock.set_faults(hang_rate=1.0)  # the first turn's call hangs until the server gives it up
    (first_trace, first_caller), (second_trace, second_caller) = new_trace(), new_trace()
    try:
        async with traced_server(phoenix, tmp_path, {"provider": {"url": mock.url}}) as server:
            session_id = await new_session(http, server.url)
            url = f"{server.url}/v1/sessions/{session_id}/turns"
            headers = {"Accept": "text/event-stream", "traceparent": first_caller}
            async with http.post(url, json={"input": "one"}, headers=headers) as first:
                await mock.stats.wait_for(lambda s: s.hung == 1, what="the first turn's call to hang")
                mock.set_faults(hang_rate=0.0)
                await chat_turn(http, server.url, session_id, {"traceparent": second_caller})  # last wins
                names = [e.name async for e in sse_events(first)]
            assert names[-1] == "turn.cancelled"
    finally:
        await mock.close()

    superseded = await phoenix.trace(http, first_trace, at_least=3)
    successor = await phoenix.trace(http, second_trace, at_least=4)
    turn = superseded.one("turn")
    assert turn.attributes["agentos.turn.outcome"] == "cancelled"
    assert turn.attributes["agentos.turn.reason"] == "superseded"
    assert turn.status != "ERROR"  # superseded is not a failure
    assert successor.one("turn").attributes["agentos.turn.outcome"] == "completed"
    assert shape(successor) == turn_tree("mock-1")
    assert shape(superseded) - {("turn", COMMIT)} == {(TURN_ROUTE, "turn"), ("turn", "chat mock-1")}
    # The turn's span link to its successor's request (`agentos.link = superseded_by`) is sent
    # (tests/telemetry/test_server_traces.py reads it on the wire) but Phoenix 20.26.1 stores no
    # links: nothing here can read it back.


async def _pending(http: aiohttp.ClientSession, url: str, run_id: str, answered: set[str]) -> dict[str, Any]:
    """The run's next human request (one whose operation is not in `answered`), once it asks:
    the run's state is polled over HTTP, bounded, as the run driver offers no event to await."""
    found: dict[str, Any] = {}

    async def asking() -> bool:
        async with http.get(f"{url}/v1/runs/{run_id}") as response:
            info = await response.json()
        pending = info.get("pending")
        if info["status"] == "waiting_human" and pending and pending["operation_id"] not in answered:
            found.update(pending)
            return True
        return False

    await eventually(asking, 20, "the run to ask a human")
    return found


async def _answer(http: aiohttp.ClientSession, url: str, run_id: str, pending: dict[str, Any]) -> None:
    """Approve an approval (the hash of what was asked), answer a question."""
    body: dict[str, Any] = {"operation_id": pending["operation_id"], "answer": "yes"}
    if pending["kind"] == "approval":
        body |= {"approve": True, "args_hash": pending["args_hash"]}
    async with http.post(f"{url}/v1/runs/{run_id}/answer", json=body) as response:
        assert response.status in (200, 202), await response.text()


async def test_an_agent_run_with_two_commands_two_approvals_and_a_question_is_stored_as_a_trace_of_its_own(
    phoenix: Phoenix, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    mock = await start_mock(MockSettings(scenario="tools", ttft_ms=1, tps=5000, tokens=3))
    caller_trace, caller = new_trace()
    ops = {"tools": ["run_command", "ask_human"], "approval_required": ["run_command"], "command": {"timeout_s": 10}}
    tree = {"provider": {"url": mock.url}, "agents": {"ops": ops}}
    try:
        async with traced_server(phoenix, tmp_path, tree) as server:
            url = f"{server.url}/v1/agents/ops/runs"
            async with http.post(url, json={"input": "go"}, headers={"traceparent": caller}) as response:
                assert response.status == 202, await response.text()
                run_id = (await response.json())["run_id"]
            answered: set[str] = set()
            kinds = []
            for _ in range(3):  # each command approved, then the question answered
                pending = await _pending(http, server.url, run_id, answered)
                await _answer(http, server.url, run_id, pending)
                answered.add(pending["operation_id"])
                kinds.append(pending["kind"])
            assert kinds == ["approval", "approval", "question"]
            async with http.get(f"{server.url}/v1/runs/{run_id}/events") as response:  # ends with the run
                assert [e.name async for e in sse_events(response)][-1] == "run.completed"
    finally:
        await mock.close()

    trace_id, root_id = derived_ids(run_id)  # a run's trace: its ids derive from its run id
    await phoenix.spans_where(http, trace_id=trace_id, name="invoke_agent ops")  # recorded when the run ends
    run = await phoenix.trace(http, trace_id, at_least=9)  # root, 3 chats, 2 commands, 3 human waits
    root = run.one("invoke_agent ops")
    assert (root.span_id, root.parent_id) == (root_id, None)
    assert root.attributes["agentos.run.id"] == run_id and root.attributes["agentos.run.status"] == "completed"
    assert root.attributes["gen_ai.operation.name"] == "invoke_agent"
    commands = run.named("execute_tool run_command")
    assert len(commands) == 2 and all(stored.parent_id == root_id for stored in commands)
    assert [c.attributes["process.exit.code"] for c in commands] == [0, 0]
    assert all(c.attributes["gen_ai.tool.name"] == "run_command" for c in commands)
    chats = run.named("chat mock-1")
    assert len(chats) >= 3 and all(c.parent_id == root_id for c in chats)
    waits = [run.one("human_wait question"), *run.named("human_wait approval")]
    assert len(waits) == 3 and all(w.parent_id == root_id for w in waits)
    assert all(w.event_names == ["agentos.human.requested", "agentos.human.answered"] for w in waits)
    # The request that started the run is in the caller's trace (its link to the run's root is
    # not stored by Phoenix).
    request = await phoenix.trace(http, caller_trace, at_least=1)
    assert request.one("POST /v1/agents/{name}/runs").parent_id == CALLER_SPAN


async def test_a_webhook_delivery_is_stored_in_the_senders_trace(
    phoenix: Phoenix, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    from tests.triggers.webhooks import Sender, create_trigger, run_outcome, serve

    sender_trace, sender_parent = new_trace()
    mock = await start_mock(MockSettings(ttft_ms=1, tps=5000, tokens=3))
    telemetry = {"enabled": True, "endpoint": phoenix.otlp_endpoint, "export_interval_s": 0.05}
    server = await serve(tmp_path / "data", mock, {}, telemetry=telemetry)
    try:
        created = await create_trigger(http, server.url)
        sender = Sender(http, server.url, created["trigger_id"], created["secret"])
        answer = await sender.send({"n": 1}, headers={"traceparent": sender_parent})
        run_id = answer.body["run_id"]
        assert await run_outcome(http, server.url, run_id) == "run.completed"
    finally:
        await server.close()
        await mock.close()

    delivery = (await phoenix.spans_where(http, trace_id=sender_trace, name="agentos.trigger.delivery"))[0]
    assert delivery.parent_id == CALLER_SPAN  # the sender's span
    assert delivery.attributes["agentos.trigger.id"] == created["trigger_id"]
    assert delivery.attributes["agentos.run.id"] == run_id and delivery.attributes["agentos.delivery.new"] is True
    trace_id, root_id = derived_ids(run_id)  # the run it started: a trace of its own
    (root,) = await phoenix.spans_where(http, trace_id=trace_id, name="invoke_agent echo")
    assert root.span_id == root_id and root.attributes["agentos.run.status"] == "completed"


@dataclass
class ServerProcess:
    proc: asyncio.subprocess.Process
    url: str


async def run_server_process(tmp_path: Path, provider_url: str, n: int, env: dict[str, str]) -> ServerProcess:
    """`tests.agents.run_server` (the real application) as a process on `tmp_path/data`, with
    `env` added to its environment; returns once it listens."""
    port_file = tmp_path / f"port-{n}"
    argv = ["-m", "tests.agents.run_server", "--data-dir", str(tmp_path / "data"), "--provider-url", provider_url]
    with (tmp_path / f"server-{n}.log").open("wb") as log:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, *argv, "--port-file", str(port_file), cwd=REPO, env=child_env(**env), stdout=log, stderr=log
        )
    await eventually(lambda: port_file.exists() or proc.returncode is not None, 20.0, "the server to listen")
    assert proc.returncode is None, (tmp_path / f"server-{n}.log").read_text()
    return ServerProcess(proc, f"http://127.0.0.1:{port_file.read_text()}")


async def test_a_run_resumed_after_kill_9_goes_on_in_the_same_trace(
    phoenix: Phoenix, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    from tests.agents.counting_mock import start_counting_mock

    mock = await start_counting_mock(MockSettings(scenario="tools", ttft_ms=1, tps=5000, tokens=3))
    mock.hold = lambda key: key[1] == 2  # the model call after the two commands: in flight at the kill
    env = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": phoenix.otlp_endpoint}  # tracing on, by the standard variable
    try:
        first = await run_server_process(tmp_path, mock.url, 1, env)
        try:
            async with http.post(f"{first.url}/v1/agents/ops/runs", json={"input": "go"}) as response:
                assert response.status == 202, await response.text()
                run_id = (await response.json())["run_id"]
            await mock.wait_held(1, timeout_s=20)
            trace_id, root_id = derived_ids(run_id)
            # what the first node ended before it dies is in Phoenix (its exporter sends every second)
            before = await phoenix.spans_where(http, trace_id=trace_id, name="execute_tool run_command", at_least=2)
        finally:
            first.proc.send_signal(signal.SIGKILL)
            await first.proc.wait()
        mock.hold = lambda _key: False
        second = await run_server_process(tmp_path, mock.url, 2, env)  # resumes the run from its journal
        try:
            await _answer(http, second.url, run_id, await _pending(http, second.url, run_id, set()))
            async with http.get(f"{second.url}/v1/runs/{run_id}/events") as response:  # ends with the run
                assert [e.name async for e in sse_events(response)][-1] == "run.completed"
        finally:
            second.proc.terminate()  # SIGTERM: the server closes, its last spans flushed
            await second.proc.wait()
    finally:
        await mock.close()

    await phoenix.spans_where(http, trace_id=trace_id, name="invoke_agent ops")  # the second node's root
    run = await phoenix.trace(http, trace_id, at_least=8)  # 4 chat, 2 execute_tool, human_wait, the root
    assert {s.span_id for s in before} <= {s.span_id for s in run.spans}  # the first node's spans, same trace
    assert run.one("invoke_agent ops").span_id == root_id
    assert run.one("invoke_agent ops").attributes["agentos.run.status"] == "completed"
    assert all(s.parent_id == root_id for s in run.spans if s.span_id != root_id)
    # Each step's span id derives from (run, step, attempt). The model step cut by the kill
    # (the third, seq 5: after two model and two tool steps) was taken again by the node that
    # resumed it: attempt 2. Attempt 1 died with the first node, never sent.
    names = {derived_ids(run_id, str(q), str(a))[1]: (q, a) for q in range(1, 12) for a in (1, 2, 3)}
    steps = sorted(names[s.span_id] for s in run.spans if s.name.startswith(("chat ", "execute_tool ")))
    assert steps == [(1, 1), (2, 1), (3, 1), (4, 1), (5, 2), (7, 1)], steps
    assert run.one("human_wait question").event_names == ["agentos.human.requested", "agentos.human.answered"]


def _delegate_once(request: ChatRequest) -> Completion:
    """The parent delegates once, then answers; the child answers at once."""
    user = [m for m in request.messages if m["role"] == "user"][-1]["content"]
    if user == "child" or tool_messages_since_user(request) > 0:
        return answer(f"{user} done")
    return call("delegate", {"input": "child"})


async def test_a_delegation_is_stored_as_the_parents_step_and_the_childs_own_trace(
    phoenix: Phoenix, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    telemetry = {"enabled": True, "endpoint": phoenix.otlp_endpoint, "export_interval_s": 0.05}
    tree: dict[str, Any] = {"data_dir": str(tmp_path), "telemetry": telemetry}
    tree["agents"] = {"a": {"tools": ["delegate"]}}
    # A scripted provider (no router, so no chat spans): the bench mock's scenarios never delegate.
    services = await open_services(settings_from_dict(tree), provider=ScriptedProvider(_delegate_once))
    server = await serve_services(services)
    try:
        async with http.post(f"{server.url}/v1/agents/a/runs", json={"input": "parent"}) as response:
            assert response.status == 202, await response.text()
            run_id = (await response.json())["run_id"]
        async with http.get(f"{server.url}/v1/runs/{run_id}/events") as response:  # ends with the run
            assert [e.name async for e in sse_events(response)][-1] == "run.completed"
    finally:
        await server.close()

    child_id = f"{run_id}.2"  # a child run is named by its parent's run and step
    trace_id, root_id = derived_ids(run_id)
    await phoenix.spans_where(http, trace_id=trace_id, name="invoke_agent a")
    parent = await phoenix.trace(http, trace_id, at_least=2)
    step = parent.one("execute_tool delegate")
    assert step.parent_id == root_id and step.attributes["agentos.step.seq"] == 2
    child_trace, child_root = derived_ids(child_id)  # the child: a trace of its own
    (child,) = await phoenix.spans_where(http, trace_id=child_trace, name="invoke_agent a")
    assert (child.span_id, child.parent_id) == (child_root, None)
    assert child.attributes["agentos.run.id"] == child_id and child.attributes["agentos.run.status"] == "completed"
    # Step -> child and child -> parent are span links: sent, not stored by Phoenix.
