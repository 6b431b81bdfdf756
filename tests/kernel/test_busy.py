"""A busy session's answers to a new turn (`on_busy`), driven with plain floats: no loop."""

from __future__ import annotations

from typing import Any

import pytest

from agentos.kernel import (
    AcceptTurn,
    CancelRequested,
    CancelTurn,
    DeliverSteer,
    GrantPermit,
    Kernel,
    KernelLimits,
    QueueTurn,
    RejectTurn,
    SessionClosed,
    SteerClaimed,
    SteerTurn,
    Tick,
    TurnCancelRequested,
    TurnEnded,
    TurnState,
    TurnSubmitted,
)
from agentos.kernel.busy import Enqueue, OnBusy, Refuse, Replace, decide


def make(**limits: Any) -> Kernel:
    return Kernel(KernelLimits(**limits))


@pytest.mark.parametrize(
    ("on_busy", "agent", "queued", "expected"),
    [
        ("replace", False, 0, Replace(rollback=False)),
        ("rollback", True, 0, Replace(rollback=True)),
        ("reject", True, 0, Refuse("turn_in_progress")),
        ("enqueue", False, 1, Enqueue(steer=False)),
        ("enqueue", False, 2, Refuse("turn_queue_full")),
        ("steer", True, 0, Enqueue(steer=True)),
        ("steer", True, 2, Refuse("turn_queue_full")),
        ("steer", False, 0, Replace(rollback=False)),  # a chat turn has nothing to steer
    ],
)
def test_the_decision_table(on_busy: OnBusy, agent: bool, queued: int, expected: object) -> None:
    assert decide(on_busy, agent_running=agent, queued=queued, max_queued=2) == expected


def test_a_turn_in_an_idle_session_is_admitted_whatever_its_strategy() -> None:
    k = make()
    assert k.handle(TurnSubmitted("s1", "t1", on_busy="reject"), now=0.0) == [AcceptTurn("t1"), GrantPermit("t1")]


def test_reject_names_the_running_turn_and_changes_nothing() -> None:
    k = make()
    k.handle(TurnSubmitted("s1", "t1"), now=0.0)
    before = k.statistics()
    commands = k.handle(TurnSubmitted("s1", "t2", on_busy="reject"), now=1.0)
    assert commands == [RejectTurn("t2", 1, "turn_in_progress", "t1")]
    assert k.active_turn("s1") == "t1" and k.turn_state("t2") is None
    after = k.statistics()
    assert after.busy_refused_total == 1 and after.in_flight_turns == before.in_flight_turns


def test_rollback_cancels_the_running_turn_marked_for_removal() -> None:
    k = make()
    k.handle(TurnSubmitted("s1", "t1"), now=0.0)
    commands = k.handle(TurnSubmitted("s1", "t2", on_busy="rollback"), now=1.0)
    assert commands[0] == CancelTurn("t1", "superseded", rollback=True)
    assert k.active_turn("s1") == "t2"


def test_enqueued_turns_run_in_order_after_the_current_one() -> None:
    k = make(max_queued_turns_per_session=2)
    k.handle(TurnSubmitted("s1", "t1"), now=0.0)
    assert k.handle(TurnSubmitted("s1", "t2", on_busy="enqueue"), now=1.0) == [QueueTurn("t2", 0)]
    assert k.handle(TurnSubmitted("s1", "t3", on_busy="enqueue"), now=1.0) == [QueueTurn("t3", 1)]
    assert k.turn_state("t2") is TurnState.QUEUED and k.statistics().in_flight_turns == 1
    assert k.handle(TurnSubmitted("s1", "t4", on_busy="enqueue"), now=1.0) == [
        RejectTurn("t4", 1, "turn_queue_full", "t1")
    ]
    assert k.statistics().queued_turns == 2
    assert k.handle(TurnEnded("t1"), now=2.0) == [AcceptTurn("t2"), GrantPermit("t2")]
    assert k.active_turn("s1") == "t2"
    assert k.handle(TurnEnded("t2"), now=3.0) == [AcceptTurn("t3"), GrantPermit("t3")]
    assert k.handle(TurnEnded("t3"), now=4.0) == []
    assert k.statistics().queued_turns == 0 and k.statistics().in_flight_turns == 0


def test_a_queued_turn_is_cancelled_by_its_id_and_the_rest_keep_their_order() -> None:
    k = make()
    k.handle(TurnSubmitted("s1", "t1"), now=0.0)
    k.handle(TurnSubmitted("s1", "t2", on_busy="enqueue"), now=0.0)
    k.handle(TurnSubmitted("s1", "t3", on_busy="enqueue"), now=0.0)
    assert k.handle(TurnCancelRequested("t2"), now=1.0) == [CancelTurn("t2", "cancelled")]
    assert k.handle(TurnEnded("t2"), now=1.0) == []  # a cancelled queued turn frees no slot
    assert k.handle(TurnEnded("t1"), now=2.0) == [AcceptTurn("t3"), GrantPermit("t3")]


def test_cancelling_the_running_turn_moves_the_queue_on() -> None:
    k = make()
    k.handle(TurnSubmitted("s1", "t1"), now=0.0)
    k.handle(TurnSubmitted("s1", "t2", on_busy="enqueue"), now=0.0)
    assert k.handle(CancelRequested("s1"), now=1.0) == [
        CancelTurn("t1", "cancelled"),
        AcceptTurn("t2"),
        GrantPermit("t2"),
    ]
    assert k.handle(TurnCancelRequested("t2"), now=1.0) == [CancelTurn("t2", "cancelled")]


def test_a_replacing_turn_cancels_the_queue_then_the_running_turn() -> None:
    k = make()
    k.handle(TurnSubmitted("s1", "t1"), now=0.0)
    k.handle(TurnSubmitted("s1", "t2", on_busy="enqueue"), now=0.0)
    commands = k.handle(TurnSubmitted("s1", "t3"), now=1.0)
    assert commands[:2] == [CancelTurn("t2", "superseded"), CancelTurn("t1", "superseded")]
    assert k.active_turn("s1") == "t3" and k.statistics().queued_turns == 0


def test_deleting_the_session_cancels_its_queue_and_turn() -> None:
    k = make()
    k.handle(TurnSubmitted("s1", "t1"), now=0.0)
    k.handle(TurnSubmitted("s1", "t2", on_busy="enqueue"), now=0.0)
    assert k.handle(SessionClosed("s1"), now=1.0) == [
        CancelTurn("t2", "session_deleted"),
        CancelTurn("t1", "session_deleted"),
    ]
    assert not k.has_session("s1")


def test_a_steer_is_claimed_at_the_agent_turns_next_step_exactly_once() -> None:
    k = make()
    k.handle(TurnSubmitted("s1", "a1", wants_permit=False), now=0.0)
    assert k.handle(TurnSubmitted("s1", "t2", on_busy="steer"), now=1.0) == [QueueTurn("t2", 0), SteerTurn("t2", "a1")]
    assert k.handle(SteerClaimed("t2", "a1"), now=2.0) == [DeliverSteer("t2", "a1")]
    assert k.handle(SteerClaimed("t2", "a1"), now=2.0) == []  # delivered once
    assert k.turn_state("t2") is None and k.active_turn("s1") == "a1"
    assert k.handle(TurnEnded("a1"), now=3.0) == []  # nothing left to promote
    assert k.statistics().steered_total == 1


def test_a_steer_the_agent_never_claimed_becomes_the_next_turn() -> None:
    k = make()
    k.handle(TurnSubmitted("s1", "a1", wants_permit=False), now=0.0)
    k.handle(TurnSubmitted("s1", "t2", wants_permit=False, on_busy="steer"), now=1.0)
    assert k.handle(TurnEnded("a1"), now=2.0) == [AcceptTurn("t2")]
    assert k.handle(SteerClaimed("t2", "a1"), now=2.0) == []  # too late: it runs as a turn
    assert k.active_turn("s1") == "t2" and k.turn_state("t2") is TurnState.RUNNING


def test_a_cancelled_agent_turn_cannot_claim_a_steer_promoted_past_it() -> None:
    k = make()
    k.handle(TurnSubmitted("s1", "a1", wants_permit=False), now=0.0)
    k.handle(TurnSubmitted("s1", "t2", wants_permit=False, on_busy="steer"), now=0.0)
    k.handle(TurnSubmitted("s1", "t3", wants_permit=False, on_busy="steer"), now=0.0)
    k.handle(CancelRequested("s1"), now=1.0)  # t2 is promoted; t3 waits behind it
    assert k.active_turn("s1") == "t2"
    assert k.handle(SteerClaimed("t3", "a1"), now=1.0) == []  # a1 is winding down: not its slot
    assert k.turn_state("t3") is TurnState.QUEUED


def test_steer_on_a_chat_turn_replaces_it() -> None:
    k = make()
    k.handle(TurnSubmitted("s1", "t1"), now=0.0)
    assert k.handle(TurnSubmitted("s1", "t2", on_busy="steer"), now=1.0)[0] == CancelTurn("t1", "superseded")


def test_a_failed_permit_wait_moves_the_queue_on() -> None:
    k = make(concurrency_limit=1, permit_wait_timeout_s=5)
    k.handle(TurnSubmitted("s0", "t0"), now=0.0)  # holds the one permit
    k.handle(TurnSubmitted("s1", "t1"), now=0.0)  # waits for it
    k.handle(TurnSubmitted("s1", "t2", wants_permit=False, on_busy="enqueue"), now=0.0)
    commands = k.handle(Tick(), now=5.0)
    assert AcceptTurn("t2") in commands and k.active_turn("s1") == "t2"


def test_a_queued_turn_whose_client_left_just_leaves_the_queue() -> None:
    k = make()
    k.handle(TurnSubmitted("s1", "t1"), now=0.0)
    k.handle(TurnSubmitted("s1", "t2", on_busy="enqueue"), now=0.0)
    assert k.handle(TurnEnded("t2"), now=1.0) == []
    assert k.statistics().queued_turns == 0 and k.active_turn("s1") == "t1"
    assert k.handle(TurnCancelRequested("nope"), now=1.0) == []
