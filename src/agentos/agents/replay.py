"""Replay: from a run's journaled steps to the conversation so far and the next action.

Pure code (no I/O), so resuming after a crash is the same code path as continuing normally:
the loop always asks `replay(steps)` what to do next. Nothing done before is repeated:
model replies and tool results come from the journal.

Next actions:
    CallModel(seq)            no reply yet for the conversation so far (or one was cut off)
    RunTool(seq, call, ...)   the next tool call of the last reply without a result
    Reconcile(seq, call)      a tool step was started but never finished: its outcome is uncertain
    WaitHuman(seq)            a human step is waiting for its answer
    Finish(text)              the last reply has no tool calls
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentos.journal.journal import Step, arguments_hash
from agentos.providers.base import Message, ToolCall

# A tool call as the journal replays it: the model's own (its id, the tool's name, the JSON text).
Call = ToolCall


@dataclass(frozen=True, slots=True)
class CallModel:
    seq: int


@dataclass(frozen=True, slots=True)
class RunTool:
    seq: int
    call: Call
    approved: bool  # a human approved this exact call, at this step, with these arguments
    retry_confirmed: bool  # a human asked to retry it after an uncertain outcome


@dataclass(frozen=True, slots=True)
class Reconcile:
    seq: int  # the uncertain tool step
    call: Call


@dataclass(frozen=True, slots=True)
class WaitHuman:
    seq: int
    request: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Finish:
    text: str


Action = CallModel | RunTool | Reconcile | WaitHuman | Finish


@dataclass(slots=True)
class RunState:
    messages: list[Message]
    turns: int = 0  # model replies received
    tokens: int = 0  # prompt + completion tokens spent
    next_seq: int = 1
    action: Action = field(default_factory=lambda: CallModel(1))


@dataclass(slots=True)
class _Walk:
    calls: list[Call] = field(default_factory=list)
    results: dict[str, str] = field(default_factory=dict)
    # A human's yes binds to one step: call id -> (the seq of the tool step it allows, the
    # hash of the arguments it saw). Both reset with every model reply, so an approval never
    # carries over to a later call that happens to reuse the id (providers that omit ids get
    # `call_0`, `call_1`... in every reply).
    approved: dict[str, tuple[int, str]] = field(default_factory=dict)
    retry: dict[str, int] = field(default_factory=dict)
    reply_text: str | None = None
    open_step: Action | None = None


def replay(system_prompt: str, user_input: str, steps: list[Step], context: Sequence[Message] = ()) -> RunState:
    """The conversation rebuilt from `steps` (after the `context` it continues), and what to do next."""
    messages: list[Message] = [{"role": "system", "content": system_prompt}] if system_prompt else []
    messages.extend(context)
    messages.append({"role": "user", "content": user_input})
    state = RunState(messages=messages, next_seq=len(steps) + 1)
    walk = _Walk()
    for step in steps:
        _apply(state, walk, step)
    state.action = walk.open_step or _next(state, walk)
    return state


def _apply(state: RunState, walk: _Walk, step: Step) -> None:
    if step.kind == "model":
        _apply_model(state, walk, step)
    elif step.kind == "tool":
        _apply_tool(state, walk, step)
    elif step.kind == "user":  # a message steered in before a model call: the next call sees it
        state.messages.append({"role": "user", "content": step.input["content"]})
    else:
        _apply_human(state, walk, step)


def _apply_model(state: RunState, walk: _Walk, step: Step) -> None:
    if step.status != "done":
        walk.open_step = CallModel(step.seq)  # cut off by a crash: a model call has no side effects
        return
    reply = step.output
    state.turns += 1
    state.tokens += reply["usage"]["prompt_tokens"] + reply["usage"]["completion_tokens"]
    walk.calls = [Call(c["id"], c["name"], c["arguments"]) for c in reply["tool_calls"]]
    walk.results = {}
    walk.approved = {}
    walk.retry = {}
    walk.reply_text = reply["text"]
    state.messages.append(assistant_message(reply))


def _apply_tool(state: RunState, walk: _Walk, step: Step) -> None:
    call = Call(**step.input)
    if step.status == "started":
        walk.open_step = Reconcile(step.seq, call)
    elif step.status == "done":
        _add_result(state, walk, call.call_id, step.output["content"])


def _apply_human(state: RunState, walk: _Walk, step: Step) -> None:
    request = step.input
    if step.status == "waiting":
        walk.open_step = WaitHuman(step.seq, request)
        return
    call_id, kind, answer = request["call_id"], request["kind"], step.output
    if kind == "question":
        _add_result(state, walk, call_id, answer["answer"])
    elif kind == "approval" and answer.get("approve"):
        walk.approved[call_id] = (step.seq + 1, request["args_hash"])
    elif kind == "approval":
        _add_result(state, walk, call_id, f"denied by a human: {answer.get('answer') or 'no reason given'}")
    elif answer.get("answer") == "retry":
        walk.retry[call_id] = step.seq + 1
    else:
        _add_result(state, walk, call_id, "outcome unknown: the tool was interrupted and a human chose not to retry")


def _add_result(state: RunState, walk: _Walk, call_id: str, content: str) -> None:
    walk.results[call_id] = content
    state.messages.append({"role": "tool", "tool_call_id": call_id, "content": content})


def _next(state: RunState, walk: _Walk) -> Action:
    if walk.reply_text is None:
        return CallModel(state.next_seq)
    for call in walk.calls:
        if call.call_id not in walk.results:
            return RunTool(
                state.next_seq,
                call,
                _approved(walk, call, state.next_seq),
                walk.retry.get(call.call_id) == state.next_seq,
            )
    if walk.calls:
        return CallModel(state.next_seq)
    return Finish(walk.reply_text)


def _approved(walk: _Walk, call: Call, seq: int) -> bool:
    """Whether a human approved exactly this call: the step right after the approval, with
    the very arguments whose hash the human confirmed."""
    binding = walk.approved.get(call.call_id)
    return binding is not None and binding == (seq, arguments_hash(call.arguments))


def assistant_message(reply: dict[str, Any]) -> Message:
    message: Message = {"role": "assistant", "content": reply["text"] or None}
    if reply["tool_calls"]:
        message["tool_calls"] = [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in reply["tool_calls"]
        ]
    return message
