"""Forks: a new run whose journal is another run's up to a step, optionally with that step edited.

Pure code (no I/O). `fork_steps` checks the caller's `at_seq` and edit against the original's
journaled steps and returns the new run's first steps: copies of steps 1..at_seq under the new
run's id. The new run then goes the way every run goes: `replay` rebuilds the conversation from
those steps (no model call, no tool call repeated: their results are in the copies) and the
runner continues live from the next action, exactly as a run resumed after a crash.

A step boundary is a finished step: a model reply, a tool result, a human answer, a steered
message. A step still open (a model call or tool call under way, an uncertain tool call, a
human request waiting) is not one, nor a human request that timed out unless the fork answers
it. The edit replaces the result of step `at_seq`: a tool's `content`, or a human's answer
(`answer`, and `approve` for an approval) as `POST /v1/runs/{id}/answer` would have given it; a
human request still waiting (or timed out) can be forked with the edit that answers it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from agentos.errors import InvalidInput
from agentos.journal.journal import Step

# The keys of a human request that name a step of its own run (`Runner._ask`).
_OPERATION_KEYS = ("operation_id", "operation_id_uncertain")


@dataclass(frozen=True, slots=True)
class ForkEdit:
    """A new result for the fork's last copied step: `content` for a tool step; `answer` (and
    `approve`, for an approval) for a human step. None: not given."""

    content: str | None = None
    answer: str | None = None
    approve: bool | None = None


def fork_steps(steps: list[Step], at_seq: int, edit: ForkEdit | None, from_run: str, to_run: str) -> list[Step]:
    """Steps 1..`at_seq` of run `from_run`, as run `to_run`'s, the last one edited by `edit`.

    Raises:
        InvalidInput: `fork_seq_out_of_range` (not 0..the last step), `fork_seq_not_a_boundary`
            (the step is not finished), `fork_edit_not_allowed` (an edit of a step that is not
            a tool result or a human answer, or of step 0), `fork_edit_invalid` (an edit that
            does not fit its step).
    """
    if not 0 <= at_seq <= len(steps):
        raise InvalidInput(
            f"at_seq must be a step of the run, from 0 to {len(steps)}, got {at_seq}", code="fork_seq_out_of_range"
        )
    copied = [_copy(step, from_run, to_run) for step in steps[:at_seq]]
    if edit is not None:
        if not copied:
            raise InvalidInput("at_seq 0 has no step to edit", code="fork_edit_not_allowed")
        copied[-1] = replace(copied[-1], status="done", output=edited_output(copied[-1], edit))
    if copied:
        _check_boundary(copied[-1])
    return copied


def _copy(step: Step, from_run: str, to_run: str) -> Step:
    value = step.input
    if step.kind == "human" and isinstance(value, dict):
        value = {key: _renamed(key, item, from_run, to_run) for key, item in value.items()}
    return replace(step, operation_id=f"{to_run}:{step.seq}", input=value, attempts=1)


def _renamed(key: str, value: Any, from_run: str, to_run: str) -> Any:
    """A human request's own operation ids name the fork's steps (its answers quote them)."""
    prefix = f"{from_run}:"
    if key in _OPERATION_KEYS and isinstance(value, str) and value.startswith(prefix):
        return f"{to_run}:{value[len(prefix) :]}"
    return value


def _check_boundary(step: Step) -> None:
    if step.status != "done":
        raise InvalidInput(
            f"step {step.seq} ({step.kind}) is {step.status}, not finished: fork at a finished step",
            code="fork_seq_not_a_boundary",
        )
    if step.kind == "human" and isinstance(step.output, dict) and step.output.get("timed_out"):
        raise InvalidInput(
            f"step {step.seq} is a human request that timed out: fork with an edit that answers it",
            code="fork_seq_not_a_boundary",
        )


def edited_output(step: Step, edit: ForkEdit) -> dict[str, Any]:
    """The step's new result. Raises: InvalidInput (see `fork_steps`)."""
    editable = (step.kind == "tool" and step.status == "done") or (
        step.kind == "human" and step.status in ("done", "waiting")  # a waiting one: the edit answers it
    )
    if not editable:
        raise InvalidInput(
            f"step {step.seq} is a {step.kind} step ({step.status}): only a tool result or a human answer"
            " can be edited",
            code="fork_edit_not_allowed",
        )
    if step.kind == "tool":
        return _tool_output(step, edit)
    return _human_output(step, edit)


def _tool_output(step: Step, edit: ForkEdit) -> dict[str, Any]:
    if edit.content is None or edit.answer is not None or edit.approve is not None:
        raise InvalidInput(f"step {step.seq} is a tool result: edit it with 'content' only", code="fork_edit_invalid")
    return {"content": edit.content}


def _human_output(step: Step, edit: ForkEdit) -> dict[str, Any]:
    kind = step.input["kind"]
    if edit.content is not None:
        raise InvalidInput(f"step {step.seq} is a human answer: edit it with 'answer'", code="fork_edit_invalid")
    if kind == "approval":
        if edit.approve is None:
            raise InvalidInput(f"step {step.seq} is an approval: the edit needs 'approve'", code="fork_edit_invalid")
        return {"answer": edit.answer or "", "approve": edit.approve}
    if edit.approve is not None or edit.answer is None:
        raise InvalidInput(f"step {step.seq} is a {kind} answer: edit it with 'answer' only", code="fork_edit_invalid")
    if kind == "uncertain" and edit.answer not in ("retry", "skip"):
        raise InvalidInput("an uncertain step is answered with 'retry' or 'skip'", code="fork_edit_invalid")
    return {"answer": edit.answer, "approve": None}
