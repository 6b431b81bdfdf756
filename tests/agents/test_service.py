"""RunService in-process, with a scripted provider: the loop, HITL, limits, cancel and terminate."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agentos.agents.handle import RunEvent
from agentos.agents.service import RunService
from agentos.config import Settings
from agentos.errors import AdmissionRejected, Conflict, InvalidInput, NotFound, ShuttingDown
from agentos.providers.base import ChatRequest, Completion
from agentos.testing import standalone_driver
from tests.agents.conftest import ServiceFactory, collect, journal_sql
from tests.agents.fakes import ScriptedProvider, answer, call, tool_messages_since_user
from tests.api.test_run_timeline import TIMELINE

SETTINGS_OPS = Settings(agents={"ops": {}})


def types(events: list[RunEvent]) -> list[str]:
    return [e.type for e in events if e.type != "token"]


async def wait_status(service: RunService, run_id: str, status: str) -> dict[str, Any]:
    """Wait (on the run's own event stream) until the run reaches `status`."""
    wanted = {
        "waiting_human": "human.requested",
        "completed": "run.completed",
        "failed": "run.failed",
        "cancelled": "run.cancelled",
    }[status]
    await collect(service, run_id, until=wanted)
    info = await service.get_run("default", run_id)
    assert info["status"] == status, info
    return info


async def test_full_loop_two_commands_then_human_then_answer(make_service: ServiceFactory, tmp_path: Path) -> None:
    service = await make_service()
    run_id = await service.start_run("default", "ops", "do the thing")
    info = await wait_status(service, run_id, "waiting_human")
    pending = info["pending"]
    assert pending["kind"] == "question" and pending["question"] == "Proceed with the final answer?"
    assert service.statistics().active_runs == 0  # a waiting run holds no task
    await service.answer("default", run_id, pending["operation_id"], "yes")
    info = await wait_status(service, run_id, "completed")
    assert info["result"] == "All done."
    events = await collect(service, run_id)
    assert types(events) == TIMELINE  # the tools scenario's run, each model call around what it asked for
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    effects = (tmp_path / "data" / "workspaces" / run_id / "effects.log").read_text()
    assert effects == "step-1\nstep-2\n"
    result = next(e for e in events if e.type == "tool.result")
    assert '"exit_code":0' in result.data["content"] and "one" in result.data["content"]


async def test_events_resume_after_seq(make_service: ServiceFactory) -> None:
    provider = ScriptedProvider(lambda r: answer("hello"), gate_at=1)
    service = await make_service(provider)
    run_id = await service.start_run("default", "ops", "hi")
    await provider.entered.wait()  # the model call is held until we follow the run live
    live = service.events("default", run_id)
    first = await anext(live)
    provider.gate.set()
    events = [first] + [e async for e in live]
    assert "".join(e.data["delta"] for e in events if e.type == "token") == "hello"  # live subscribers get tokens
    stored = [e for e in events if e.type != "token"]
    assert [e.type for e in stored] == ["run.started", "model.started", "model.completed", "run.completed"]
    assert [e async for e in service.events("default", run_id)] == stored  # tokens are live-only
    assert [e async for e in service.events("default", run_id, after_seq=1)] == stored[1:]


async def test_a_slow_subscriber_is_bounded_and_loses_only_tokens(make_service: ServiceFactory) -> None:
    """Defect 5 of issue 7: a subscriber's queue grew without bound while its reader did not read."""
    long_text = "x" * 2000  # the scripted provider streams it as two deltas; many runs make many tokens
    provider = ScriptedProvider(lambda r: answer(long_text), gate_at=1)
    service = await make_service(provider)
    run_id = await service.start_run("default", "ops", "hi")
    await provider.entered.wait()
    slow = service.events("default", run_id)
    assert (await anext(slow)).type == "run.started"
    handle = service._runs.handles[run_id]
    for i in range(10_000):  # far more than the bound, published while the reader sleeps
        service._runs.emit(handle, "token", {"delta": str(i)})
    assert service._runs.fanout.count() == 1
    provider.gate.set()
    rest = [e async for e in slow]
    tokens = [e for e in rest if e.type == "token"]
    assert len(tokens) <= 256  # the bound: the rest were dropped, not queued
    assert rest[-1].type == "run.completed"  # the journaled events all arrive
    assert service.statistics().subscribers == 0


async def test_max_turns_ends_the_run(make_service: ServiceFactory) -> None:
    looping = ScriptedProvider(lambda r: call("run_command", {"command": ["true"]}, f"c{len(r.messages)}"))
    service = await make_service(looping, agents={"a": {"max_turns": 3}})
    run_id = await service.start_run("default", "a", "loop forever")
    info = await wait_status(service, run_id, "failed")
    assert str(info["reason"]).startswith("max_turns")
    assert len(looping.requests) == 3


async def test_token_budget_ends_the_run(make_service: ServiceFactory) -> None:
    looping = ScriptedProvider(lambda r: call("run_command", {"command": ["true"]}, f"c{len(r.messages)}"))
    service = await make_service(looping, agents={"a": {"token_budget": 20}})
    run_id = await service.start_run("default", "a", "spend")
    info = await wait_status(service, run_id, "failed")
    assert str(info["reason"]).startswith("token_budget")
    assert len(looping.requests) == 2  # 15 tokens after one reply, 30 after two: over 20


def delegating(request: ChatRequest) -> Completion:
    # A child's conversation starts with its own user message: k counts tool results since then.
    k = tool_messages_since_user(request)
    return call("delegate", {"input": "sub-task"}, f"d{k}") if k < 3 else answer("parent done")


async def test_delegation_depth_limit(make_service: ServiceFactory) -> None:
    agents = {"a": {"tools": ["delegate"], "max_delegation_depth": 1}}
    service = await make_service(ScriptedProvider(delegating), agents=agents)
    run_id = await service.start_run("default", "a", "delegate")
    await wait_status(service, run_id, "completed")
    child = await service.get_run("default", f"{run_id}.2")  # the child of the root's step 2 (its first tool step)
    assert child["parent_run_id"] == run_id
    assert child["status"] == "failed" and str(child["reason"]).startswith("max_delegation_depth: 1")
    results = [e.data["content"] for e in await collect(service, run_id) if e.type == "tool.result"]
    assert "max_delegation_depth" in results[0]


async def test_delegation_width_limit(make_service: ServiceFactory) -> None:
    def script(request: ChatRequest) -> Completion:
        messages = request.messages
        if messages[-1]["role"] == "user" and messages[-1]["content"] == "sub-task":
            return answer("child answer")
        k = tool_messages_since_user(request)
        return call("delegate", {"input": "sub-task"}, f"d{k}")

    service = await make_service(
        ScriptedProvider(script), agents={"a": {"tools": ["delegate"], "max_delegation_width": 2}}
    )
    run_id = await service.start_run("default", "a", "fan out")
    info = await wait_status(service, run_id, "failed")
    assert str(info["reason"]).startswith("max_delegation_width: 2")
    children = [e for e in await collect(service, run_id) if e.type == "tool.result"]
    assert [c.data["content"] for c in children] == ["child answer", "child answer"]


async def test_approval_needs_the_same_hash(make_service: ServiceFactory) -> None:
    script = ScriptedProvider(
        lambda r: answer("ok") if r.messages[-1]["role"] == "tool" else call("run_command", {"command": ["echo", "hi"]})
    )
    service = await make_service(script, agents={"a": {"approval_required": ["run_command"]}})
    run_id = await service.start_run("default", "a", "approve me")
    pending = (await wait_status(service, run_id, "waiting_human"))["pending"]
    assert pending["kind"] == "approval" and pending["tool"] == "run_command"
    op = pending["operation_id"]
    with pytest.raises(Conflict):
        await service.answer("default", run_id, op, approve=True, args_hash="0" * 64)
    with pytest.raises(InvalidInput):
        await service.answer("default", run_id, op, approve=True)
    with pytest.raises(Conflict):
        await service.answer("default", run_id, "other:1", approve=True, args_hash=pending["args_hash"])
    await service.answer("default", run_id, op, approve=True, args_hash=pending["args_hash"])
    info = await wait_status(service, run_id, "completed")
    assert info["result"] == "ok"
    assert '"stdout":"hi\\n"' in script.requests[-1].messages[-1]["content"]


async def test_approval_denied_tells_the_model(make_service: ServiceFactory) -> None:
    script = ScriptedProvider(
        lambda r: (
            answer(r.messages[-1]["content"])
            if r.messages[-1]["role"] == "tool"
            else call("run_command", {"command": ["echo", "hi"]})
        )
    )
    service = await make_service(script, agents={"a": {"approval_required": ["run_command"]}})
    run_id = await service.start_run("default", "a", "approve me")
    pending = (await wait_status(service, run_id, "waiting_human"))["pending"]
    await service.answer(
        "default", run_id, pending["operation_id"], "too risky", approve=False, args_hash=pending["args_hash"]
    )
    info = await wait_status(service, run_id, "completed")
    assert info["result"] == "denied by a human: too risky"


async def test_human_timeout_fails_the_run(make_service: ServiceFactory) -> None:
    service = await make_service(agents={"ops": {"human_timeout_s": 0.05}})
    run_id = await service.start_run("default", "ops", "ask")
    info = await wait_status(service, run_id, "failed")
    assert str(info["reason"]).startswith("human_timeout")


async def test_unknown_run_and_agent(make_service: ServiceFactory) -> None:
    service = await make_service()
    with pytest.raises(NotFound):
        await service.get_run("default", "nope")
    with pytest.raises(NotFound):
        await service.start_run("default", "nope", "x")
    with pytest.raises(InvalidInput):
        await service.start_run("default", "ops", "  ")


# --- cancel and terminate in every state ---


async def test_cancel_and_terminate_while_waiting_human(make_service: ServiceFactory) -> None:
    service = await make_service()
    first = await service.start_run("default", "ops", "one")
    second = await service.start_run("default", "ops", "two")
    await wait_status(service, first, "waiting_human")
    await wait_status(service, second, "waiting_human")
    assert (await service.cancel("default", first))["reason"] == "cancelled"
    assert (await service.terminate("default", second))["reason"] == "terminated"
    for run_id in (first, second):
        assert (await service.get_run("default", run_id))["status"] == "cancelled"
        assert types(await collect(service, run_id))[-1] == "run.cancelled"


async def test_cancel_is_soft_while_running(make_service: ServiceFactory) -> None:
    provider = ScriptedProvider(gate_at=1)
    service = await make_service(provider)
    run_id = await service.start_run("default", "ops", "x")
    await provider.entered.wait()
    info = await service.cancel("default", run_id)
    assert info["status"] == "running"  # stops at the next step, not in the middle of one
    provider.gate.set()
    info = await wait_status(service, run_id, "cancelled")
    assert len(provider.requests) == 1
    assert "tool.call" not in types(await collect(service, run_id))


async def test_terminate_is_immediate_while_running(make_service: ServiceFactory) -> None:
    provider = ScriptedProvider(gate_at=1)
    service = await make_service(provider)
    run_id = await service.start_run("default", "ops", "x")
    await provider.entered.wait()
    info = await service.terminate("default", run_id)
    assert info["status"] == "cancelled" and info["reason"] == "terminated"


async def test_terminate_during_a_command(make_service: ServiceFactory) -> None:
    started = ScriptedProvider(lambda r: call("run_command", {"command": ["sleep", "30"]}))
    service = await make_service(started)
    run_id = await service.start_run("default", "ops", "x")
    await collect(service, run_id, until="tool.call")
    info = await asyncio.wait_for(service.terminate("default", run_id), timeout=5)
    assert info["status"] == "cancelled"


async def test_over_max_active_runs_a_start_is_refused_with_retry_after(make_service: ServiceFactory) -> None:
    """Defect 5 of issue 7: runs queued without bound behind a semaphore; now they get a 429."""
    provider = ScriptedProvider(gate_at=1)
    service = await make_service(provider, max_active_runs=1)
    busy = await service.start_run("default", "ops", "busy")
    await provider.entered.wait()
    with pytest.raises(AdmissionRejected) as rejected:
        await service.start_run("default", "ops", "one too many")
    assert rejected.value.retry_after_s is not None and rejected.value.retry_after_s >= 1
    assert service.statistics().handles == 1  # nothing was kept for the refused run
    assert len(provider.requests) == 1
    assert (await service.terminate("default", busy))["status"] == "cancelled"
    again = await service.start_run("default", "ops", "now there is room")  # the slot came back
    assert (await service.terminate("default", again))["status"] == "cancelled"


async def test_cancel_and_terminate_when_finished_change_nothing(make_service: ServiceFactory) -> None:
    service = await make_service(ScriptedProvider(lambda r: answer("fine")))
    run_id = await service.start_run("default", "ops", "x")
    await wait_status(service, run_id, "completed")
    assert (await service.cancel("default", run_id))["status"] == "completed"
    assert (await service.terminate("default", run_id))["status"] == "completed"
    with pytest.raises(Conflict):
        await service.answer("default", run_id, f"{run_id}:1", "late")


async def test_in_memory_journal() -> None:
    """data_dir=None: nothing on disk but a temporary workspace, removed at close."""
    service = RunService(ScriptedProvider(), None, SETTINGS_OPS, driver=standalone_driver(SETTINGS_OPS))
    await service.start()
    run_id = await service.start_run("default", "ops", "x")
    await wait_status(service, run_id, "waiting_human")
    workspace = service._runs.workdir(run_id)
    assert (workspace / "effects.log").read_text() == "step-1\nstep-2\n"
    await service.close()
    assert not workspace.exists()


async def test_an_approval_never_carries_over_to_a_later_call_with_the_same_id(
    make_service: ServiceFactory, tmp_path: Path
) -> None:
    """Defect 2 of issue 7: after one approved `c1`, a later `c1` with other arguments ran unasked."""
    script = [
        call("run_command", {"command": ["echo", "harmless"]}, "c1"),
        call("run_command", {"command": ["sh", "-c", "echo EVIL > pwned"]}, "c1"),
        answer("done"),
    ]
    provider = ScriptedProvider(lambda r: script[tool_messages_since_user(r)])
    agents = {"guard": {"tools": ["run_command"], "approval_required": ["run_command"]}}
    service = await make_service(provider, agents=agents)
    run_id = await service.start_run("default", "guard", "go")
    first = (await wait_status(service, run_id, "waiting_human"))["pending"]
    assert first["arguments"] == script[0].tool_calls[0].arguments
    await service.answer("default", run_id, first["operation_id"], approve=True, args_hash=first["args_hash"])
    after_first = (await collect(service, run_id, until="human.answered"))[-1].seq
    async for event in service.events("default", run_id, after_seq=after_first):
        assert event.type not in ("run.completed", "run.failed"), event
        if event.type == "human.requested":
            break
    second = (await service.get_run("default", run_id))["pending"]
    assert second["kind"] == "approval" and second["operation_id"] != first["operation_id"]
    assert "EVIL" in second["arguments"]
    assert not (tmp_path / "data" / "workspaces" / run_id / "pwned").exists()


async def test_a_draining_service_refuses_answers_and_new_runs(make_service: ServiceFactory) -> None:
    service = await make_service()
    run_id = await service.start_run("default", "ops", "do the thing")
    pending = (await wait_status(service, run_id, "waiting_human"))["pending"]
    service.accepting = False  # what Runtime.drain does
    with pytest.raises(ShuttingDown):
        await service.answer("default", run_id, pending["operation_id"], "yes")
    with pytest.raises(ShuttingDown):
        await service.start_run("default", "ops", "more")
    assert (await service.get_run("default", run_id))["status"] == "waiting_human"  # nothing resumed


async def test_a_tool_result_or_model_reply_is_heard_of_only_once_it_is_in_the_journal(
    make_service: ServiceFactory, journal_settings: Settings, tmp_path: Path
) -> None:
    """A subscriber that reads the journal behind the service's back the moment it hears of a
    step's event finds it there: a crash after the event reached a client cannot take it back
    (the faults campaign once counted a tool.result a kill -9 had lost, and its seq reused)."""
    service = await make_service()
    run_id = await service.start_run("default", "ops", "do the thing")
    checked = []
    async with asyncio.timeout(10):
        async for event in service.events("default", run_id):
            if event.type in ("tool.result", "model.completed"):
                sql = "SELECT type FROM run_events WHERE run_id = ? AND seq = ?"
                assert await journal_sql(journal_settings, tmp_path / "data", sql, run_id, event.seq) == [
                    (event.type,)
                ], event
                checked.append(event.type)
            if event.type == "human.requested":
                break
    assert checked == ["model.completed", "tool.result", "model.completed", "tool.result", "model.completed"]


async def test_a_call_of_a_tool_the_agent_lacks_is_answered_with_an_error(make_service: ServiceFactory) -> None:
    provider = ScriptedProvider(lambda r: call("nope", {}) if len(r.messages) < 3 else answer("fine"))
    service = await make_service(provider)
    run_id = await service.start_run("default", "ops", "do the thing")
    assert (await wait_status(service, run_id, "completed"))["result"] == "fine"
    events = await collect(service, run_id)
    result = next(e for e in events if e.type == "tool.result")
    content = "error: unknown tool 'nope'"
    assert (result.data["call_id"], result.data["name"], result.data["content"]) == ("c1", "nope", content)
    steps = [s for s in await service.store.load_steps("default", run_id) if s.kind == "tool"]
    assert [(s.status, s.output) for s in steps] == [("done", {"content": content})]
