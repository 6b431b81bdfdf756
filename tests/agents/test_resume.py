"""Resuming from the journal after the service stops mid-run (in-process; kill -9 is in test_durability)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agentos.agents.service import RunService
from agentos.clock import wall_ms
from agentos.config import Settings
from agentos.errors import InvalidInput
from agentos.kernel import RunEnded
from agentos.providers.base import ChatRequest, Completion
from tests.agents.conftest import ServiceFactory, collect, journal_sql
from tests.agents.fakes import ScriptedProvider, answer, call, tool_messages_since_user


async def pending(service: RunService, run_id: str) -> dict[str, Any]:
    await collect(service, run_id, until="human.requested")
    info = await service.get_run("default", run_id)
    assert info["status"] == "waiting_human", info
    request: dict[str, Any] = info["pending"]
    return request


async def test_model_calls_and_tools_are_not_repeated(make_service: ServiceFactory, tmp_path: Path) -> None:
    first = ScriptedProvider(gate_at=3)  # two replies journaled, the third call never answers
    service = await make_service(first)
    run_id = await service.start_run("default", "ops", "x")
    await first.entered.wait()
    await service.close(drain_s=0)  # like a crash: nothing gets to finish
    second = ScriptedProvider()
    resumed = await make_service(second)
    request = await pending(resumed, run_id)
    assert len(second.requests) == 1 and tool_messages_since_user(second.requests[0]) == 2
    await resumed.answer("default", run_id, request["operation_id"], "yes")
    await collect(resumed, run_id)
    assert (await resumed.get_run("default", run_id))["status"] == "completed"
    assert len(second.requests) == 2
    assert (tmp_path / "data" / "workspaces" / run_id / "effects.log").read_text() == "step-1\nstep-2\n"
    events = await collect(resumed, run_id)
    names = [e.type for e in events]
    assert "run.resumed" in names and names.count("run.started") == 1
    # The model events are not repeated either: one model.completed per model step; the call cut
    # off (step 5) has a model.started per attempt, one before the stop and one after.
    started = [(e.data["operation_id"], e.data["attempt"]) for e in events if e.type == "model.started"]
    completed = [e.data["operation_id"] for e in events if e.type == "model.completed"]
    steps = [f"{run_id}:{seq}" for seq in (1, 3, 5, 7)]
    assert completed == steps
    assert started == [(steps[0], 1), (steps[1], 1), (steps[2], 1), (steps[2], 2), (steps[3], 1)]
    model, tool = ["model.started", "model.completed"], ["tool.call", "tool.result"]
    assert names == [
        "run.started",
        *model,
        *tool,
        *model,
        *tool,
        "model.started",
        "run.resumed",
        *model,
        "human.requested",
        "human.answered",
        *model,
        "run.completed",
    ]
    assert [e.seq for e in events] == list(range(1, len(events) + 1))


async def test_a_waiting_run_taken_over_is_never_owned_without_its_wait(make_service: ServiceFactory) -> None:
    """A node that takes a waiting run over (`agentos.agents.cluster`, `recover_one`) must not be
    seen owning it before its kernel holds the wait: an answer arriving then was refused
    `409 not_waiting` (seen in a clean-clone run). A watcher looks at every turn of the loop while
    the run is resumed from the journal; then the answer is taken at once."""
    service = await make_service(ScriptedProvider())
    run_id = await service.start_run("default", "ops", "x")
    request = await pending(service, run_id)
    runs = service._runs
    row = await runs.store.load_run("default", run_id)
    assert row is not None and row.status == "waiting_human"
    runs.handles.pop(run_id)  # as the node that lost it does (`RunCluster._lost`)
    runs.driver.handle(RunEnded(run_id, "suspended"))
    assert runs.driver.kernel.pending_human(run_id) is None
    seen: list[bool] = []

    async def watch() -> None:
        while True:
            if run_id in runs.handles:
                seen.append(runs.driver.kernel.pending_human(run_id) is not None)
            await asyncio.sleep(0)

    watcher = asyncio.create_task(watch())
    await runs.recover_one(row)
    await asyncio.sleep(0)  # the watcher looks once more, with the run resumed
    watcher.cancel()
    assert seen and all(seen), seen
    await service.answer("default", run_id, request["operation_id"], "yes")
    await collect(service, run_id)
    assert (await service.get_run("default", run_id))["status"] == "completed"


def slow_command(request: ChatRequest) -> Completion:
    if request.messages[-1]["role"] == "tool":
        return answer(request.messages[-1]["content"])
    return call("run_command", {"command": ["sh", "-c", "echo once >> effects.log; sleep 30"]})


@pytest.mark.parametrize("choice", ["skip", "retry"])
async def test_an_interrupted_command_is_uncertain(make_service: ServiceFactory, tmp_path: Path, choice: str) -> None:
    agents = {"ops": {"command": {"timeout_s": 0.5 if choice == "retry" else 30}}}
    service = await make_service(ScriptedProvider(slow_command), agents=agents)
    run_id = await service.start_run("default", "ops", "x")
    await collect(service, run_id, until="tool.call")
    await service.close(drain_s=0)  # the command is killed with the service: did it do its work? unknown
    resumed = await make_service(ScriptedProvider(slow_command), agents=agents)
    request = await pending(resumed, run_id)
    assert request["kind"] == "uncertain" and request["operation_id_uncertain"] == f"{run_id}:2"
    with pytest.raises(InvalidInput):
        await resumed.answer("default", run_id, request["operation_id"], "maybe")
    await resumed.answer("default", run_id, request["operation_id"], choice)
    await collect(resumed, run_id)
    info = await resumed.get_run("default", run_id)
    assert info["status"] == "completed"
    log = tmp_path / "data" / "workspaces" / run_id / "effects.log"
    runs_before = 0 if not log.exists() else log.read_text().count("once") - (choice == "retry")
    assert runs_before in (0, 1)  # stopped right after it started, or a little later: that is the uncertainty
    if choice == "skip":
        assert "outcome unknown" in str(info["result"])
    else:
        assert '"timed_out":true' in str(info["result"]) and log.read_text().endswith("once\n")  # run again


def delegate_once(request: ChatRequest) -> Completion:
    user = [m for m in request.messages if m["role"] == "user"][-1]["content"]
    k = tool_messages_since_user(request)
    if user == "child":
        return call("ask_human", {"question": "ok?"}) if k == 0 else answer("child says hi")
    return call("delegate", {"input": "child"}) if k == 0 else answer(f"parent got: {request.messages[-1]['content']}")


async def test_delegation_reattaches_to_its_child(make_service: ServiceFactory) -> None:
    agents = {"a": {"tools": ["delegate", "ask_human"]}}
    service = await make_service(ScriptedProvider(delegate_once), agents=agents)
    run_id = await service.start_run("default", "a", "parent")
    child_id = f"{run_id}.2"
    started = await collect(service, run_id, until="run.child_started")
    assert started[-1].data["child_run_id"] == child_id
    await pending(service, child_id)
    await service.close(drain_s=0)  # like a crash: nothing gets to finish
    resumed = await make_service(ScriptedProvider(delegate_once), agents=agents)
    request = await pending(resumed, child_id)
    await resumed.answer("default", child_id, request["operation_id"], "yes")
    await collect(resumed, run_id)
    info = await resumed.get_run("default", run_id)
    assert info["status"] == "completed" and info["result"] == "parent got: child says hi"
    assert resumed.statistics().handles == 0
    assert await resumed.store.count_children(run_id) == 1


async def test_a_run_that_cannot_resume_fails_with_the_reason(
    make_service: ServiceFactory, tmp_path: Path, journal_settings: Settings
) -> None:
    first = ScriptedProvider(gate_at=1)
    service = await make_service(first)
    run_id = await service.start_run("default", "ops", "x")
    await first.entered.wait()
    await service.close(drain_s=0)  # like a crash: nothing gets to finish
    corrupt = "UPDATE payloads SET body = '{\"name\": 5}' WHERE hash = (SELECT spec_ref FROM runs WHERE run_id = ?)"
    await journal_sql(journal_settings, tmp_path / "data", corrupt, run_id)
    resumed = await make_service()
    info = await resumed.get_run("default", run_id)
    assert info["status"] == "failed" and str(info["reason"]).startswith("cannot resume")


async def test_waiting_runs_come_back_waiting_without_a_task(make_service: ServiceFactory) -> None:
    service = await make_service()
    runs = [await service.start_run("default", "ops", f"job-{i}") for i in range(20)]
    for run_id in runs:
        await pending(service, run_id)
    await service.close(drain_s=0)  # like a crash: nothing gets to finish
    resumed = await make_service()
    stats = resumed.statistics()
    assert stats.active_runs == 0 and stats.waiting_runs == 20 and stats.pending_deadlines == 20


async def test_a_graceful_close_lets_the_current_step_finish(make_service: ServiceFactory, tmp_path: Path) -> None:
    def slowish(request: ChatRequest) -> Completion:
        if request.messages[-1]["role"] == "tool":
            return answer("finished")
        return call("run_command", {"command": ["sh", "-c", "sleep 0.3; echo once >> effects.log"]})

    service = await make_service(ScriptedProvider(slowish))
    run_id = await service.start_run("default", "ops", "x")
    await collect(service, run_id, until="tool.call")
    await service.close(drain_s=10)
    resumed = await make_service(ScriptedProvider(slowish))
    events = await collect(resumed, run_id)
    assert events[-1].type == "run.completed" and "tool.uncertain" not in [e.type for e in events]
    assert (tmp_path / "data" / "workspaces" / run_id / "effects.log").read_text() == "once\n"


async def test_a_deadline_that_passed_while_down_fails_the_run(make_service: ServiceFactory) -> None:
    agents = {"ops": {"human_timeout_s": 60}}
    service = await make_service(agents=agents)
    run_id = await service.start_run("default", "ops", "x")
    await pending(service, run_id)
    await service.close(drain_s=0)
    later = await make_service(agents=agents, now_ms=lambda: wall_ms() + 61_000)  # back a minute later
    events = await collect(later, run_id)
    assert events[-1].type == "run.failed" and events[-1].data["reason"].startswith("human_timeout")
