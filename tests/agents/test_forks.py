"""Forks on the service, on both journals: a recorded run with an approval, a tool, a question
and a delegation, forked at every step, reproduces the original up to the step without a
model call (the provider's request log proves it) and without a tool run again."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from agentos.agents.forks import ForkEdit
from agentos.agents.service import RunService
from agentos.errors import InvalidInput, NotFound
from agentos.journal.journal import Step
from agentos.journal.run_list import RunQuery
from agentos.providers.base import ChatRequest, Completion
from tests.agents.conftest import ServiceFactory, asyncio_timeout
from tests.agents.fakes import ScriptedProvider, answer, call, tool_messages_since_user

AGENTS: dict[str, dict[str, Any]] = {
    "boss": {
        "tools": ["run_command", "ask_human", "delegate"],
        "approval_required": ["run_command"],
        "command": {"timeout_s": 10},
    },
    "helper": {"tools": []},
}
# The original run's journal: (kind, what) per step.
RECORDED = [
    ("model", "run_command"),
    ("human", "approval"),
    ("tool", "run_command"),
    ("model", "ask_human"),
    ("human", "question"),
    ("model", "delegate"),
    ("tool", "delegate"),
    ("model", "answer"),
]
FINAL = "final: yes | child says hi"


def user_text(request: ChatRequest) -> str:
    return str([m for m in request.messages if m["role"] == "user"][-1]["content"])


def boss_script(request: ChatRequest) -> Completion:
    """Approve-then-run a command, ask a question, delegate, then answer with what it heard."""
    if user_text(request) == "child":
        return answer("child says hi")
    k = tool_messages_since_user(request)
    if k == 0:
        return call("run_command", {"command": ["sh", "-c", "echo ran >> effects.log"]}, "c0")
    if k == 1:
        return call("ask_human", {"question": "go on?"}, "c1")
    if k == 2:
        return call("delegate", {"agent": "helper", "input": "child"}, "c2")
    heard = [str(m["content"]) for m in request.messages if m["role"] == "tool"]
    return answer("final: " + " | ".join(c for c in heard if not c.startswith("{")))


async def drive(service: RunService, run_id: str, tenant: str = "default") -> tuple[dict[str, Any], list[str]]:
    """Follow the run to its end, answering as the original was answered (approve, "yes"); its
    final row and its event types."""
    names: list[str] = []
    async with asyncio_timeout(20):
        async for event in service.events(tenant, run_id):
            names.append(event.type)
            if event.type == "human.requested":
                request = event.data
                if request["kind"] == "approval":
                    approve = {"approve": True, "args_hash": request["args_hash"]}
                    await service.answer(tenant, run_id, request["operation_id"], **approve)
                else:
                    await service.answer(tenant, run_id, request["operation_id"], "yes")
    return await service.get_run(tenant, run_id), names


def shape(steps: list[Step], run_id: str) -> list[tuple[Any, ...]]:
    """Steps as comparable across runs: the run's own id taken out of the operation ids."""

    def plain(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items() if k not in ("deadline_ms", "asked_ms")}
        return value.replace(run_id, "<run>") if isinstance(value, str) else value

    return [(s.seq, s.kind, s.status, plain(s.operation_id), plain(s.input), plain(s.output)) for s in steps]


async def recorded_run(service: RunService, provider: ScriptedProvider) -> str:
    run_id = await service.start_run("default", "boss", "parent")
    info, _ = await drive(service, run_id)
    assert info["status"] == "completed" and info["result"] == FINAL, info
    steps = await service.store.load_steps("default", run_id)
    assert [s.kind for s in steps] == [kind for kind, _ in RECORDED]
    assert len(provider.requests) == 5  # 4 of the boss, 1 of the child
    return run_id


async def test_a_fork_at_each_step_reproduces_the_original_without_a_model_call(
    make_service: ServiceFactory, tmp_path: Path
) -> None:
    provider = ScriptedProvider(boss_script)
    service = await make_service(provider, agents=AGENTS)
    original = await recorded_run(service, provider)
    before = shape(await service.store.load_steps("default", original), original)
    for at_seq in range(len(RECORDED) + 1):
        provider.requests.clear()
        fork_id = await service.fork_run("default", original, at_seq)
        info, names = await drive(service, fork_id)
        assert info["status"] == "completed" and info["result"] == FINAL, (at_seq, info)
        assert info["forked_from"] == {"run_id": original, "at_seq": at_seq}
        assert names[0] == "run.forked" and "run.started" not in names
        after = shape(await service.store.load_steps("default", fork_id), fork_id)
        assert after[:at_seq] == before[:at_seq]  # the copied journal
        assert [s[1:3] for s in after] == [s[1:3] for s in before]  # and the rest done again, alike
        # The model calls after the step only, the child's with its delegation; none before it.
        later = Counter(what for kind, what in RECORDED[at_seq:] if kind == "tool")
        boss_calls = sum(1 for r in provider.requests if user_text(r) == "parent")
        assert boss_calls == sum(1 for kind, _ in RECORDED[at_seq:] if kind == "model"), at_seq
        assert len(provider.requests) - boss_calls == later["delegate"], at_seq
        assert names.count("tool.call") == sum(1 for kind, _ in RECORDED[at_seq:] if kind == "tool"), at_seq
        effects = tmp_path / "data" / "workspaces" / fork_id / "effects.log"
        assert effects.exists() == (at_seq < 3), at_seq  # the command ran in the fork only if after the step
    # The original is untouched.
    assert shape(await service.store.load_steps("default", original), original) == before
    assert (await service.get_run("default", original))["forked_from"] is None


async def test_edited_results_flow_into_the_fork(make_service: ServiceFactory) -> None:
    provider = ScriptedProvider(boss_script)
    service = await make_service(provider, agents=AGENTS)
    original = await recorded_run(service, provider)
    delegated = await service.fork_run("default", original, 7, ForkEdit(content="an edited child"))
    info, _ = await drive(service, delegated)
    assert info["result"] == "final: yes | an edited child"
    answered = await service.fork_run("default", original, 5, ForkEdit(answer="no way"))
    info, _ = await drive(service, answered)
    assert info["result"] == "final: no way | child says hi"
    # A denied approval: the command never runs, the model hears why.
    provider.requests.clear()
    denied = await service.fork_run("default", original, 2, ForkEdit(answer="not today", approve=False))
    info, names = await drive(service, denied)
    assert info["status"] == "completed" and "tool.call" not in names[: names.index("human.requested")]
    tool_messages = [m["content"] for m in provider.requests[0].messages if m["role"] == "tool"]
    assert tool_messages == ["denied by a human: not today"]
    assert (await service.get_run("default", original))["result"] == FINAL


async def test_a_fork_can_answer_a_request_still_waiting(make_service: ServiceFactory) -> None:
    provider = ScriptedProvider(boss_script)
    service = await make_service(provider, agents=AGENTS)
    run_id = await service.start_run("default", "boss", "parent")
    async with asyncio_timeout(10):
        async for event in service.events("default", run_id):
            if event.type == "human.requested":
                break
    with pytest.raises(InvalidInput) as waiting:
        await service.fork_run("default", run_id, 2)
    assert waiting.value.code == "fork_seq_not_a_boundary"
    fork_id = await service.fork_run("default", run_id, 2, ForkEdit(approve=True))
    info, _ = await drive(service, fork_id)
    assert info["status"] == "completed" and info["result"] == FINAL
    assert (await service.get_run("default", run_id))["status"] == "waiting_human"  # the original still waits


@pytest.mark.parametrize(
    ("at_seq", "edit", "code"),
    [
        (9, None, "fork_seq_out_of_range"),
        (-1, None, "fork_seq_out_of_range"),
        (0, ForkEdit(content="x"), "fork_edit_not_allowed"),
        (1, ForkEdit(content="x"), "fork_edit_not_allowed"),  # a model reply
        (3, ForkEdit(answer="x"), "fork_edit_invalid"),  # a tool result takes `content`
        (3, ForkEdit(content="x", approve=True), "fork_edit_invalid"),
        (2, ForkEdit(answer="x"), "fork_edit_invalid"),  # an approval needs `approve`
        (5, ForkEdit(approve=True, answer="x"), "fork_edit_invalid"),  # a question takes `answer` only
    ],
)
async def test_hostile_forks_are_refused_and_start_nothing(
    make_service: ServiceFactory, at_seq: int, edit: ForkEdit | None, code: str
) -> None:
    provider = ScriptedProvider(boss_script)
    service = await make_service(provider, agents=AGENTS)
    original = await recorded_run(service, provider)
    with pytest.raises(InvalidInput) as refused:
        await service.fork_run("default", original, at_seq, edit)
    assert refused.value.code == code
    listed = await service.list_runs("default", _query())
    assert sum(1 for run in listed["data"] if run["forked_from"] is not None) == 0


async def test_another_tenants_run_cannot_be_forked(make_service: ServiceFactory) -> None:
    provider = ScriptedProvider(boss_script)
    service = await make_service(provider, agents=AGENTS)
    original = await recorded_run(service, provider)
    for tenant, run_id in (("other", original), ("default", "run_missing")):
        with pytest.raises(NotFound) as missing:
            await service.fork_run(tenant, run_id, 1)
        assert missing.value.code == "run_not_found"


async def test_a_fork_survives_a_restart_and_lists_its_origin(make_service: ServiceFactory) -> None:
    provider = ScriptedProvider(boss_script)
    service = await make_service(provider, agents=AGENTS)
    original = await recorded_run(service, provider)
    fork_id = await service.fork_run("default", original, 3)
    async with asyncio_timeout(10):
        async for event in service.events("default", fork_id):
            if event.type == "human.requested":  # the question, asked again live
                break
    await service.close(drain_s=0)
    again = ScriptedProvider(boss_script)
    resumed = await make_service(again, agents=AGENTS)
    info, names = await drive(resumed, fork_id)
    assert info["status"] == "completed" and info["result"] == FINAL
    assert len(again.requests) == 3  # after the answer: the delegation, the child, the final answer
    listed = await resumed.list_runs("default", _query())
    origins = {run["run_id"]: run["forked_from"] for run in listed["data"]}
    assert origins[fork_id] == {"run_id": original, "at_seq": 3} and origins[original] is None


def _query() -> RunQuery:
    return RunQuery(limit=100)


async def test_a_fork_keeps_the_session_context_and_the_system_prompt(
    make_service: ServiceFactory,
) -> None:
    provider = ScriptedProvider(lambda request: answer(f"{len(request.messages)} messages"))
    agents = {"plain": {"tools": [], "system_prompt": "be brief"}}
    service = await make_service(provider, agents=agents)
    context: list[Any] = [{"role": "user", "content": "earlier"}, {"role": "assistant", "content": "noted"}]
    run_id = await service.start_run("default", "plain", "now", context=context)
    info, _ = await drive(service, run_id)
    fork_id = await service.fork_run("default", run_id, 0)
    fork, names = await drive(service, fork_id)
    assert fork["result"] == info["result"] == "4 messages"
    assert provider.requests[-1].messages == provider.requests[0].messages  # system, context, input
    assert names[0] == "run.forked" and fork["session_id"] == info["session_id"]
