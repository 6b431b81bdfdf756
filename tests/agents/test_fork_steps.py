"""`fork_steps`, pure: what a fork copies of a journal, and which steps and edits it refuses."""

from __future__ import annotations

import pytest

from agentos.agents.forks import ForkEdit, fork_steps
from agentos.errors import InvalidInput
from agentos.journal.journal import Step

REPLY = {"text": "", "tool_calls": [{"id": "c1", "name": "run_command", "arguments": "{}"}], "usage": {}}
CALL = {"call_id": "c1", "name": "run_command", "arguments": "{}"}
UNCERTAIN = {"operation_id": "run_a:3", "kind": "uncertain", "call_id": "c1", "operation_id_uncertain": "run_a:2"}
JOURNAL = [
    Step(1, "model", "run_a:1", "done", None, REPLY, 2),
    Step(2, "tool", "run_a:2", "uncertain", CALL, {"outcome": "uncertain"}, 1),
    Step(3, "human", "run_a:3", "done", UNCERTAIN, {"answer": "retry", "approve": None}, 1),
    Step(4, "tool", "run_a:4", "started", CALL, None, 1),
]


def test_the_copies_are_the_forks_own_steps() -> None:
    copied = fork_steps(JOURNAL, 3, None, "run_a", "run_b")
    assert [s.operation_id for s in copied] == ["run_b:1", "run_b:2", "run_b:3"]
    assert copied[2].input["operation_id"] == "run_b:3" and copied[2].input["operation_id_uncertain"] == "run_b:2"
    assert [s.attempts for s in copied] == [1, 1, 1]
    assert [(s.kind, s.status, s.output) for s in copied] == [(s.kind, s.status, s.output) for s in JOURNAL[:3]]
    assert JOURNAL[2].input["operation_id"] == "run_a:3"  # the original's are not changed
    assert fork_steps(JOURNAL, 0, None, "run_a", "run_b") == []


def test_an_uncertain_decision_can_be_edited_to_the_other_one() -> None:
    copied = fork_steps(JOURNAL, 3, ForkEdit(answer="skip"), "run_a", "run_b")
    assert copied[-1].output == {"answer": "skip", "approve": None}
    with pytest.raises(InvalidInput) as refused:
        fork_steps(JOURNAL, 3, ForkEdit(answer="maybe"), "run_a", "run_b")
    assert refused.value.code == "fork_edit_invalid"


@pytest.mark.parametrize(("at_seq", "code"), [(2, "fork_seq_not_a_boundary"), (4, "fork_seq_not_a_boundary")])
def test_open_steps_are_not_boundaries(at_seq: int, code: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        fork_steps(JOURNAL, at_seq, None, "run_a", "run_b")
    assert refused.value.code == code
    with pytest.raises(InvalidInput) as edited:  # nor can such a tool step be edited into one
        fork_steps(JOURNAL, at_seq, ForkEdit(content="x"), "run_a", "run_b")
    assert edited.value.code == "fork_edit_not_allowed"


def test_a_timed_out_request_needs_the_edit_that_answers_it() -> None:
    question = {"operation_id": "run_a:2", "kind": "question", "call_id": "c1"}
    journal = [JOURNAL[0], Step(2, "human", "run_a:2", "done", question, {"timed_out": True}, 1)]
    with pytest.raises(InvalidInput) as refused:
        fork_steps(journal, 2, None, "run_a", "run_b")
    assert refused.value.code == "fork_seq_not_a_boundary"
    assert fork_steps(journal, 2, ForkEdit(answer="late"), "run_a", "run_b")[-1].output == {
        "answer": "late",
        "approve": None,
    }
