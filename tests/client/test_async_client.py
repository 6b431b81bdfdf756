"""`AsyncClient` against the real server on loopback and the real mock provider over HTTP.

The client is the thing under test; nothing of the server is faked."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import aclosing
from pathlib import Path

import pytest

from agentos.client import APIError, AsyncClient, RunEvent, TurnEvent
from agentos.mock.server import MockServer
from agentos.testing import RunningServer
from tests.client.conftest import CAREFUL


async def test_a_session_turn_streamed_then_read_back(server: RunningServer) -> None:
    async with AsyncClient(server.url) as client:
        session = await client.create_session(metadata={"user": "ada"})
        assert session.metadata == {"user": "ada"} and session.session_id
        events = [e async for e in client.stream_turn(session.session_id, "hello world")]
        assert [e.name for e in events] == ["turn.started", "token", "token", "token", "token", "turn.completed"]
        assert all(isinstance(e, TurnEvent) and e.event_id for e in events)
        assert "".join(e.data["delta"] for e in events if e.name == "token") == "tok tok tok tok "
        assert events[-1].terminal and events[-1].data["usage"]["completion_tokens"] == 4

        whole = await client.send_turn(session.session_id, "again")
        assert (whole.status, whole.output, whole.session_id) == ("completed", "tok tok tok tok ", session.session_id)
        assert whole.usage is not None and whole.usage["completion_tokens"] == 4

        messages = await client.messages(session.session_id)
        assert [(m.role, m.content) for m in messages.data] == [
            ("user", "hello world"),
            ("assistant", "tok tok tok tok "),
            ("user", "again"),
            ("assistant", "tok tok tok tok "),
        ]
        first = await client.messages(session.session_id, limit=3)
        rest = await client.messages(session.session_id, after=int(first.next_cursor or 0))
        assert len(first.data) == 3 and [m.content for m in rest.data] == ["tok tok tok tok "]
        stored = await client.events(session.session_id)
        assert [e.type for e in stored.data] == ["turn.started", "turn.completed"] * 2
        assert (await client.get_session(session.session_id)).active_turn is None
        assert session.session_id in [s.session_id for s in (await client.list_sessions(limit=10)).data]

        await client.delete_session(session.session_id)
        with pytest.raises(APIError) as caught:
            await client.get_session(session.session_id)
        assert (caught.value.status, caught.value.code) == (404, "session_not_found")


async def test_an_unknown_session_is_a_typed_404(server: RunningServer) -> None:
    async with AsyncClient(server.url) as client:
        with pytest.raises(APIError) as caught:
            await client.send_turn("nope", "hi")
        error = caught.value
        assert (error.status, error.code, error.retry_after_s) == (404, "session_not_found", None)
        assert "'nope'" in error.message
        with pytest.raises(APIError) as streamed:  # a stream that never started: the same error, no event
            async for _ in client.stream_turn("nope", "hi"):
                raise AssertionError("no event may come")
        assert streamed.value.code == "session_not_found"
        with pytest.raises(APIError) as bad:
            await client.send_turn((await client.create_session()).session_id, "   ")
        assert (bad.value.status, bad.value.code) == (422, "invalid_input")


async def test_an_admission_rejection_is_a_429_with_retry_after(
    server_factory: Callable[..., Awaitable[RunningServer]], mock_factory: Callable[..., Awaitable[MockServer]]
) -> None:
    mock = await mock_factory(ttft_ms=5, tps=50, tokens=30)
    server = await server_factory(mock.url, **{"kernel.max_in_flight_turns": 1})
    async with AsyncClient(server.url) as client:
        busy, other = (await client.create_session()).session_id, (await client.create_session()).session_id
        names: list[str] = []
        async for event in client.stream_turn(busy, "long"):
            names.append(event.name)
            if event.name == "token" and names.count("token") == 1:
                with pytest.raises(APIError) as caught:
                    await client.send_turn(other, "refused")
                assert (caught.value.status, caught.value.code) == (429, "overloaded")
                assert caught.value.retry_after_s == 1.0
                assert await client.cancel_turn(busy) is not None  # and the running turn is ours to stop
        assert names[-1] == "turn.cancelled"
        assert await client.cancel_turn(busy) is None  # nothing runs any more


async def test_an_agent_run_approved_and_answered_to_completion(tools_server: RunningServer, tmp_path: Path) -> None:
    async with AsyncClient(tools_server.url) as client:
        agent = await client.create_agent({"name": "careful", **CAREFUL})
        assert agent["approval_required"] == ["run_command"] and agent["source"] == "api"
        assert [a["name"] for a in await client.list_agents()] == ["careful"]
        assert (await client.get_agent("careful"))["tools"] == ["run_command", "ask_human"]

        session = await client.create_session()  # a run joins a session of the caller's tenant
        ref = await client.start_run("careful", "tidy up", session_id=session.session_id)
        assert ref.status == "queued" and ref.events_url == f"/v1/runs/{ref.run_id}/events"
        seen: list[RunEvent] = []
        async for event in client.run_events(ref.run_id):
            seen.append(event)
            if event.name == "human.requested":
                request = event.human_request()
                waiting = await client.get_run(ref.run_id)
                assert waiting.status == "waiting_human" and waiting.pending == request
                assert (await client.list_runs(status="waiting_human")).data == [waiting]  # the inbox
                if request.kind == "approval":
                    assert request.tool == "run_command" and request.args_hash
                    with pytest.raises(APIError) as wrong:
                        await client.answer(ref.run_id, request.operation_id, approve=True, args_hash="f" * 64)
                    assert (wrong.value.status, wrong.value.code) == (409, "args_hash_mismatch")
                    await client.answer(ref.run_id, request.operation_id, approve=True, args_hash=request.args_hash)
                else:
                    assert request.question == "Proceed with the final answer?"
                    await client.answer(ref.run_id, request.operation_id, "yes")
        names = [e.name for e in seen if e.name != "token"]
        model = ["model.started", "model.completed"]  # the model call that asks, or answers
        approve_and_run = [*model, "human.requested", "human.answered", "tool.call", "tool.result"]
        question = [*model, "human.requested", "human.answered"]
        assert names == ["run.started", *approve_and_run, *approve_and_run, *question, *model, "run.completed"]
        seqs = [e.seq for e in seen if e.name != "token"]
        assert seqs == list(range(1, len(seqs) + 1))
        assert all(e.seq is None for e in seen if e.name == "token")
        run = await client.get_run(ref.run_id)
        assert (run.status, run.session_id, run.pending) == ("completed", session.session_id, None) and run.result
    assert (tmp_path / "data" / "workspaces" / ref.run_id / "effects.log").read_text() == "step-1\nstep-2\n"


async def test_run_events_resume_after_a_seq(tools_server: RunningServer) -> None:
    async with AsyncClient(tools_server.url) as client:
        await client.create_agent({"name": "ops", "tools": ["run_command", "ask_human"]})
        ref = await client.start_run("ops", "go")
        async with aclosing(client.run_events(ref.run_id)) as events:
            async for event in events:
                if event.name == "human.requested":
                    asked = event
                    break  # leave mid-run: the stream closes, the run waits on
        assert asked.seq is not None
        await client.answer(ref.run_id, asked.human_request().operation_id, "yes")
        rest = [e async for e in client.run_events(ref.run_id, after=asked.seq)]
        model = ["model.started", "model.completed"]  # the call that answers
        assert [e.name for e in rest if e.name != "token"] == ["human.answered", *model, "run.completed"]
        assert rest[0].seq == asked.seq + 1
        stored = [e async for e in client.run_events(ref.run_id)]  # after the end: the journal, no tokens
        times = [e.at_ms for e in stored if e.at_ms is not None]
        assert len(times) == len(stored) and times == sorted(times)
        assert all(e.at_ms is None for e in rest if e.name == "token")  # live only: no journal time
        assert [e.seq for e in stored][asked.seq :] == [e.seq for e in rest if e.seq is not None]
        assert not [e for e in stored if e.name == "token"]


async def test_cancel_and_terminate_a_run(tools_server: RunningServer) -> None:
    async with AsyncClient(tools_server.url) as client:
        await client.create_agent({"name": "ops", "tools": ["run_command", "ask_human"]})
        ref = await client.start_run("ops", "go")
        async with aclosing(client.run_events(ref.run_id)) as events:
            async for event in events:
                if event.name == "human.requested":
                    break
        cancelled = await client.cancel_run(ref.run_id)
        assert cancelled.status == "cancelled"
        assert (await client.terminate_run(ref.run_id)).status == "cancelled"
        assert [e.name async for e in client.run_events(ref.run_id)][-1] == "run.cancelled"
        with pytest.raises(APIError) as caught:
            await client.get_run("run_nope")
        assert (caught.value.status, caught.value.code) == (404, "run_not_found")
