"""replay(): the journal -> the conversation and the next action (pure)."""

from __future__ import annotations

from typing import Any

from agentos.agents.replay import CallModel, Finish, Reconcile, RunTool, WaitHuman, replay
from agentos.journal.journal import Step, arguments_hash


def model(seq: int, calls: list[tuple[str, str]], text: str = "", status: str = "done", arguments: str = "{}") -> Step:
    reply = {
        "text": text,
        "finish_reason": "tool_calls" if calls else "stop",
        "usage": {"prompt_tokens": 3, "completion_tokens": 2},
        "tool_calls": [{"id": cid, "name": name, "arguments": arguments} for cid, name in calls],
    }
    return Step(seq, "model", f"r:{seq}", status, None, reply if status == "done" else None, 1)


def tool(seq: int, call_id: str, name: str, content: str | None, status: str = "done") -> Step:
    output = {"content": content} if content is not None else None
    return Step(seq, "tool", f"r:{seq}", status, {"call_id": call_id, "name": name, "arguments": "{}"}, output, 1)


def human(seq: int, call_id: str, kind: str, answer: dict[str, Any] | None, arguments: str = "{}") -> Step:
    request = {"call_id": call_id, "kind": kind, "operation_id": f"r:{seq}", "args_hash": arguments_hash(arguments)}
    return Step(seq, "human", f"r:{seq}", "done" if answer else "waiting", request, answer, 1)


def test_empty_journal_calls_the_model() -> None:
    state = replay("sys", "hello", [])
    assert state.action == CallModel(1)
    assert state.messages == [{"role": "system", "content": "sys"}, {"role": "user", "content": "hello"}]


def test_a_cut_off_model_call_is_retried_at_the_same_step() -> None:
    assert replay("", "x", [model(1, [], status="started")]).action == CallModel(1)


def test_tool_results_are_replayed_not_rerun() -> None:
    steps = [model(1, [("a", "run_command"), ("b", "run_command")]), tool(2, "a", "run_command", "one")]
    state = replay("", "x", steps)
    assert isinstance(state.action, RunTool) and state.action.call.call_id == "b" and state.action.seq == 3
    assert state.messages[-1] == {"role": "tool", "tool_call_id": "a", "content": "one"}
    assert state.turns == 1 and state.tokens == 5


def test_all_results_in_calls_the_model_then_finishes() -> None:
    steps = [model(1, [("a", "run_command")]), tool(2, "a", "run_command", "one")]
    assert replay("", "x", steps).action == CallModel(3)
    assert replay("", "x", [*steps, model(3, [], text="bye")]).action == Finish("bye")


def test_a_started_tool_is_uncertain() -> None:
    steps = [model(1, [("a", "run_command")]), tool(2, "a", "run_command", None, status="started")]
    action = replay("", "x", steps).action
    assert isinstance(action, Reconcile) and action.seq == 2


def test_humans() -> None:
    base = [model(1, [("a", "ask_human")])]
    assert isinstance(replay("", "x", [*base, human(2, "a", "question", None)]).action, WaitHuman)
    answered = replay("", "x", [*base, human(2, "a", "question", {"answer": "yes"})])
    assert answered.action == CallModel(3) and answered.messages[-1]["content"] == "yes"
    approved = replay("", "x", [model(1, [("a", "run_command")]), human(2, "a", "approval", {"approve": True})]).action
    assert isinstance(approved, RunTool) and approved.approved
    uncertain = [model(1, [("a", "run_command")]), tool(2, "a", "run_command", None, status="uncertain")]
    retry = replay("", "x", [*uncertain, human(3, "a", "uncertain", {"answer": "retry"})]).action
    assert isinstance(retry, RunTool) and retry.retry_confirmed and retry.seq == 4
    skipped = replay("", "x", [*uncertain, human(3, "a", "uncertain", {"answer": "skip"})])
    assert skipped.action == CallModel(4) and "outcome unknown" in skipped.messages[-1]["content"]


def test_arguments_hash_is_canonical() -> None:
    assert arguments_hash('{"b": 1, "a": [1, 2]}') == arguments_hash('{"a":[1,2],"b":1}')
    assert arguments_hash('{"a": 1}') != arguments_hash('{"a": 2}')


def test_an_approval_binds_to_its_step_and_arguments_only() -> None:
    """Defect: approvals were keyed by call id alone, so a later call reusing the id ran unasked."""
    harmless, evil = '{"command": ["echo", "harmless"]}', '{"command": ["sh", "-c", "echo EVIL > pwned"]}'
    approved = [
        model(1, [("c1", "run_command")], arguments=harmless),
        human(2, "c1", "approval", {"approve": True}, arguments=harmless),
    ]
    first = replay("", "x", approved).action
    assert isinstance(first, RunTool) and first.approved and first.seq == 3
    ran = [*approved, tool(3, "c1", "run_command", "harmless")]
    later = replay("", "x", [*ran, model(4, [("c1", "run_command")], arguments=evil)]).action
    assert isinstance(later, RunTool) and later.seq == 5 and not later.approved
    same_args_again = replay("", "x", [*ran, model(4, [("c1", "run_command")], arguments=harmless)]).action
    assert isinstance(same_args_again, RunTool) and not same_args_again.approved


def test_an_approval_of_other_arguments_does_not_approve_the_call() -> None:
    steps = [
        model(1, [("c1", "run_command")], arguments='{"command": ["rm", "-rf", "x"]}'),
        human(2, "c1", "approval", {"approve": True}, arguments='{"command": ["ls"]}'),
    ]
    action = replay("", "x", steps).action
    assert isinstance(action, RunTool) and not action.approved


def test_a_steered_message_joins_the_conversation_at_its_step_once() -> None:
    """A `user` step (a message steered into the run) sits after the tool results it followed
    and before the model call that answers it; replaying the journal puts it there once."""
    steps = [
        model(1, [("c1", "run_command")]),
        tool(2, "c1", "run_command", "ok"),
        Step(3, "user", "r:3", "done", {"content": "use blue"}, None, 1),
    ]
    state = replay("", "build", steps)
    assert state.action == CallModel(4)
    assert [m["role"] for m in state.messages] == ["user", "assistant", "tool", "user"]
    assert state.messages[-1]["content"] == "use blue"
    answered = replay("", "build", [*steps, model(4, [], text="blue it is")])
    assert answered.action == Finish("blue it is")
    assert [m["content"] for m in answered.messages if m["role"] == "user"] == ["build", "use blue"]
