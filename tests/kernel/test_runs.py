"""The run transitions, event by event, with plain floats for time: no loop, no sleeps.

Illegal events: a run id submitted twice, a running run resumed, a waiting run parked again
raise AssertionError and change nothing (runtime bugs). Events that can race with the kernel's
own decisions (cancelling, ending or answering a run already gone, a stream for a run that
stopped) are answered without a change: [] , `RejectAnswer`, or `FailTurn("run_not_running")`.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentos.kernel import (
    AcceptAnswer,
    AcceptRun,
    CancelTurn,
    Command,
    Event,
    ExpireHuman,
    FailTurn,
    FinishRun,
    GrantPermit,
    HumanAnswered,
    HumanRequested,
    Kernel,
    KernelLimits,
    KernelStatistics,
    ProviderReleased,
    RejectAnswer,
    RejectRun,
    RunCancelRequested,
    RunEnded,
    RunOutcome,
    RunResumed,
    RunState,
    RunSubmitted,
    StartRun,
    StopRun,
    StreamRequested,
    Tick,
    TurnEnded,
    TurnState,
)


def make(**limits: Any) -> Kernel:
    return Kernel(KernelLimits(**limits))


def ask(run_id: str, seq: int = 2, args_hash: str | None = None, deadline_s: float = 100.0) -> HumanRequested:
    return HumanRequested(run_id, f"{run_id}:{seq}", seq, args_hash, deadline_s)


def started(k: Kernel, *run_ids: str, now: float = 0.0) -> None:
    for run_id in run_ids:
        assert k.handle(RunSubmitted(run_id), now) == [AcceptRun(run_id), StartRun(run_id)]


def waiting(k: Kernel, run_id: str, **kwargs: Any) -> None:
    started(k, run_id)
    assert k.handle(ask(run_id, **kwargs), 0.0) == []


def unchanged(k: Kernel, event: Event, before: KernelStatistics) -> None:
    with pytest.raises(AssertionError):
        k.handle(event, 0.0)
    assert k.statistics() == before


# -- RunSubmitted -------------------------------------------------------------------------------


def test_a_run_is_admitted_and_started() -> None:
    k = make(max_active_runs=2)
    started(k, "r1")
    assert k.run_state("r1") is RunState.RUNNING
    stats = k.statistics()
    assert (stats.active_runs, stats.runs_admitted_total, stats.run_admission_limit) == (1, 1, 2)


def test_over_max_active_runs_a_run_is_rejected_and_nothing_changes() -> None:
    k = make(max_active_runs=1, retry_after_s=3)
    started(k, "r1")
    assert k.handle(RunSubmitted("r2"), 0.0) == [RejectRun("r2", 3)]
    assert k.run_state("r2") is None
    stats = k.statistics()
    assert (stats.active_runs, stats.runs_admitted_total, stats.runs_rejected_total) == (1, 1, 1)


def test_no_run_gate_when_the_limit_is_zero() -> None:
    k = make()
    started(k, *[f"r{i}" for i in range(50)])
    assert k.statistics().active_runs == 50


def test_a_waiting_run_frees_its_admission_slot() -> None:
    k = make(max_active_runs=1)
    waiting(k, "r1")
    started(k, "r2")
    assert k.statistics().active_runs == 1 and k.statistics().waiting_runs == 1


def test_a_child_of_a_running_run_is_never_rejected() -> None:
    """The parent waits for its child: refusing the child would deadlock the parent."""
    k = make(max_active_runs=1)
    started(k, "r1")
    assert k.handle(RunSubmitted("r1.3", parent_run_id="r1"), 0.0) == [AcceptRun("r1.3"), StartRun("r1.3")]
    assert k.statistics().active_runs == 2


def test_a_child_of_a_waiting_or_unknown_parent_goes_through_the_gate() -> None:
    k = make(max_active_runs=1)
    waiting(k, "r1")
    started(k, "r2")
    assert k.handle(RunSubmitted("r1.3", parent_run_id="r1"), 0.0) == [RejectRun("r1.3", 1)]
    assert k.handle(RunSubmitted("x.1", parent_run_id="x"), 0.0) == [RejectRun("x.1", 1)]


@pytest.mark.parametrize(("hard", "reason"), [(False, "cancelled"), (True, "terminated")])
def test_a_child_submitted_while_its_parent_stops_is_stopped_at_once(hard: bool, reason: str) -> None:
    k = make()
    started(k, "r1")
    k.handle(RunCancelRequested("r1", hard=hard), 0.0)
    commands = k.handle(RunSubmitted("r1.3", parent_run_id="r1"), 0.0)
    assert commands == [AcceptRun("r1.3"), StartRun("r1.3"), StopRun("r1.3", hard, reason)]


def test_submitting_a_run_twice_is_a_bug_that_changes_nothing() -> None:
    k = make()
    started(k, "r1")
    unchanged(k, RunSubmitted("r1"), k.statistics())


# -- RunResumed ---------------------------------------------------------------------------------


def test_a_recovered_run_resumes_without_the_gate() -> None:
    k = make(max_active_runs=1)
    started(k, "r1")
    assert k.handle(RunResumed("r0"), 0.0) == [StartRun("r0")]
    stats = k.statistics()
    assert (stats.active_runs, stats.runs_admitted_total, stats.runs_rejected_total) == (2, 1, 0)


def test_a_waiting_run_resumed_loses_its_deadline() -> None:
    k = make()
    waiting(k, "r1")
    assert k.handle(RunResumed("r1"), 0.0) == [StartRun("r1")]
    assert k.run_state("r1") is RunState.RUNNING and k.human_deadline("r1") is None
    assert k.pending_human("r1") is None and k.next_deadline() is None


def test_resuming_a_running_run_is_a_bug_that_changes_nothing() -> None:
    k = make()
    started(k, "r1")
    unchanged(k, RunResumed("r1"), k.statistics())


# -- HumanRequested -----------------------------------------------------------------------------


def test_a_run_asking_a_human_parks_with_its_deadline() -> None:
    k = make(max_active_runs=1)
    started(k, "r1")
    assert k.handle(ask("r1", seq=4, args_hash="h", deadline_s=60.0), 1.0) == []
    assert k.run_state("r1") is RunState.WAITING
    pending = k.pending_human("r1")
    assert pending is not None and (pending.operation_id, pending.step_seq, pending.args_hash) == ("r1:4", 4, "h")
    assert k.human_deadline("r1") == 60.0 and k.next_deadline() == 60.0
    stats = k.statistics()
    assert (stats.active_runs, stats.waiting_runs, stats.human_deadlines_pending) == (0, 1, 1)


def test_a_parking_run_gives_up_its_streams_and_holds_no_permit() -> None:
    k = make(concurrency_limit=1)
    started(k, "r1")
    assert k.handle(StreamRequested("m1", owner="r1"), 0.0) == [GrantPermit("m1")]
    assert k.handle(StreamRequested("m2", owner="r1"), 0.0) == []
    commands = k.handle(ask("r1"), 0.0)
    assert commands == [CancelTurn("m1", "run_parked"), FailTurn("m2", "run_parked")]
    assert k.turn_state("m1") is TurnState.CANCELLING and k.turn_state("m2") is TurnState.FAILED
    started(k, "r2")
    assert k.handle(StreamRequested("m3", owner="r2"), 0.0) == []  # m1's upstream is still closing
    assert k.handle(ProviderReleased("m1"), 0.0) == [GrantPermit("m3")]  # not m2: it left the line
    assert k.handle(TurnEnded("m1"), 0.0) == [] and k.handle(TurnEnded("m2"), 0.0) == []
    assert k.statistics().permits_in_use == 1 and k.statistics().live_turns == 1


def test_a_restart_learns_a_waiting_run_from_the_journal() -> None:
    k = make(max_active_runs=1)
    started(k, "other")
    assert k.handle(HumanRequested("r1", "r1:2", 2, None, 5.0, parent_run_id="p"), 0.0) == []
    assert k.run_state("r1") is RunState.WAITING and k.human_deadline("r1") == 5.0
    assert k.statistics().waiting_runs == 1 and k.statistics().runs_admitted_total == 1
    assert k.handle(RunResumed("p"), 0.0) == [StartRun("p")]
    assert k.handle(RunCancelRequested("p", hard=True), 0.0) == [
        StopRun("p", True, "terminated"),
        FinishRun("r1", "cancelled", "terminated"),
    ]


@pytest.mark.parametrize(("hard", "reason"), [(False, "cancelled"), (True, "terminated")])
def test_a_run_parking_with_a_cancel_pending_is_finished_at_once(hard: bool, reason: str) -> None:
    k = make()
    started(k, "r1")
    k.handle(RunCancelRequested("r1", hard=hard), 0.0)
    assert k.handle(ask("r1"), 0.0) == [FinishRun("r1", "cancelled", reason)]
    assert k.run_state("r1") is None and k.human_deadline("r1") is None
    assert k.handle(RunEnded("r1", "cancelled"), 0.0) == []  # its task ends; nothing more to do
    assert k.statistics().active_runs == 0


def test_asking_twice_is_a_bug_that_changes_nothing() -> None:
    k = make()
    waiting(k, "r1")
    unchanged(k, ask("r1", seq=3), k.statistics())
    pending = k.pending_human("r1")
    assert pending is not None and pending.step_seq == 2


# -- HumanAnswered ------------------------------------------------------------------------------


def test_an_answer_resumes_the_run_and_removes_its_deadline_at_once() -> None:
    """Defect 5 of issue #7: answered deadlines stayed in the heap until they expired."""
    k = make(max_active_runs=1)
    waiting(k, "r1")
    started(k, "r2")
    assert k.handle(HumanAnswered("r1", "r1:2"), 1.0) == [AcceptAnswer("r1", "r1:2", 2), StartRun("r1")]
    assert k.human_deadline("r1") is None and k.next_deadline() is None
    stats = k.statistics()
    assert (stats.active_runs, stats.waiting_runs, stats.human_deadlines_pending) == (2, 0, 0)
    assert k.handle(Tick(), 1000.0) == []


@pytest.mark.parametrize("approve", [True, False])
def test_an_approval_binds_to_its_operation_and_arguments(approve: bool) -> None:
    k = make()
    waiting(k, "r1", args_hash="h1")
    commands = k.handle(HumanAnswered("r1", "r1:2", args_hash="h1", approve=approve), 0.0)
    assert commands == [AcceptAnswer("r1", "r1:2", 2), StartRun("r1")]


def rejected(k: Kernel, answer: HumanAnswered) -> str:
    before = (k.statistics(), k.run_state(answer.run_id), k.pending_human(answer.run_id))
    commands: list[Command] = k.handle(answer, 0.0)
    assert len(commands) == 1 and isinstance(commands[0], RejectAnswer)
    assert (k.statistics(), k.run_state(answer.run_id), k.pending_human(answer.run_id)) == before
    return commands[0].code


def test_answers_that_do_not_bind_are_rejected_and_change_nothing() -> None:
    k = make()
    started(k, "running")
    waiting(k, "r1", args_hash="h1")
    assert rejected(k, HumanAnswered("ghost", "ghost:2")) == "not_waiting"
    assert rejected(k, HumanAnswered("running", "running:2")) == "not_waiting"
    assert rejected(k, HumanAnswered("r1", "r1:1", args_hash="h1", approve=True)) == "operation_mismatch"
    assert rejected(k, HumanAnswered("r1", "r1:2", args_hash="h1")) == "approval_required"
    assert rejected(k, HumanAnswered("r1", "r1:2", args_hash="h2", approve=True)) == "args_hash_mismatch"
    assert rejected(k, HumanAnswered("r1", "r1:2", approve=True)) == "args_hash_mismatch"


def test_an_approval_never_carries_over_to_a_later_step() -> None:
    """Defect 2 of issue #7: an approval keyed by call id let a later call with the same id run."""
    k = make()
    waiting(k, "r1", seq=3, args_hash="harmless")
    k.handle(HumanAnswered("r1", "r1:3", args_hash="harmless", approve=True), 0.0)
    k.handle(ask("r1", seq=5, args_hash="evil"), 0.0)
    assert rejected(k, HumanAnswered("r1", "r1:3", args_hash="harmless", approve=True)) == "operation_mismatch"
    assert rejected(k, HumanAnswered("r1", "r1:5", args_hash="harmless", approve=True)) == "args_hash_mismatch"


# -- RunCancelRequested -------------------------------------------------------------------------


def test_a_soft_cancel_lets_the_current_step_finish() -> None:
    k = make()
    started(k, "r1")
    k.handle(StreamRequested("m1", owner="r1"), 0.0)
    assert k.handle(RunCancelRequested("r1"), 0.0) == [StopRun("r1", False, "cancelled")]
    assert k.run_state("r1") is RunState.STOPPING and k.statistics().active_runs == 1
    assert k.turn_state("m1") is TurnState.STREAMING  # the step in flight goes on
    assert k.handle(StreamRequested("m2", owner="r1"), 0.0) == [GrantPermit("m2")]
    assert k.handle(RunCancelRequested("r1"), 0.0) == []  # a repeat
    assert k.handle(RunEnded("r1", "cancelled"), 0.0) == [
        CancelTurn("m1", "run_ended"),
        CancelTurn("m2", "run_ended"),
    ]
    assert k.run_state("r1") is None and k.statistics().active_runs == 0


def test_a_hard_cancel_stops_the_task_and_its_streams_now() -> None:
    k = make(concurrency_limit=1)
    started(k, "r1")
    k.handle(StreamRequested("m1", owner="r1"), 0.0)
    k.handle(StreamRequested("m2", owner="r1"), 0.0)
    k.handle(RunCancelRequested("r1"), 0.0)
    assert k.handle(RunCancelRequested("r1", hard=True), 0.0) == [
        StopRun("r1", True, "terminated"),
        CancelTurn("m1", "terminated"),
        FailTurn("m2", "terminated"),
    ]
    assert k.run_state("r1") is RunState.TERMINATING and k.statistics().active_runs == 1
    assert k.handle(StreamRequested("m3", owner="r1"), 0.0) == [FailTurn("m3", "run_not_running")]
    assert k.turn_state("m3") is None  # refused streams are not recorded
    assert k.handle(RunCancelRequested("r1", hard=True), 0.0) == []
    assert k.handle(RunCancelRequested("r1"), 0.0) == []


@pytest.mark.parametrize(("hard", "reason"), [(False, "cancelled"), (True, "terminated")])
def test_cancelling_a_waiting_run_finishes_it_at_once(hard: bool, reason: str) -> None:
    k = make()
    waiting(k, "r1")
    assert k.handle(RunCancelRequested("r1", hard=hard), 0.0) == [FinishRun("r1", "cancelled", reason)]
    assert k.run_state("r1") is None and k.human_deadline("r1") is None
    assert k.statistics().waiting_runs == 0 and k.next_deadline() is None
    assert k.handle(HumanAnswered("r1", "r1:2"), 0.0)[0] == RejectAnswer(
        "r1", "not_waiting", "run 'r1' is not waiting for a human"
    )


def test_cancelling_an_unknown_run_does_nothing() -> None:
    k = make()
    assert k.handle(RunCancelRequested("ghost", hard=True), 0.0) == []


def test_a_cancel_cascades_to_the_children_with_the_same_force() -> None:
    k = make()
    started(k, "p")
    k.handle(RunSubmitted("p.1", parent_run_id="p"), 0.0)
    k.handle(RunSubmitted("p.2", parent_run_id="p"), 0.0)
    k.handle(RunSubmitted("p.2.1", parent_run_id="p.2"), 0.0)
    k.handle(ask("p.1"), 0.0)
    assert k.handle(RunCancelRequested("p"), 0.0) == [
        StopRun("p", False, "cancelled"),
        FinishRun("p.1", "cancelled", "cancelled"),
        StopRun("p.2", False, "cancelled"),
        StopRun("p.2.1", False, "cancelled"),
    ]
    # the parent ends cancelled: children still alive are terminated
    assert k.handle(RunEnded("p", "cancelled"), 0.0) == [
        StopRun("p.2", True, "terminated"),
        StopRun("p.2.1", True, "terminated"),
    ]


# -- RunEnded -----------------------------------------------------------------------------------


def test_a_run_that_ends_is_forgotten_and_frees_its_slot() -> None:
    k = make(max_active_runs=1)
    started(k, "r1")
    assert k.handle(RunEnded("r1", "completed"), 0.0) == []
    assert k.run_state("r1") is None
    started(k, "r2")
    assert k.handle(RunEnded("r1", "completed"), 0.0) == []  # unknown: ignored


@pytest.mark.parametrize("status", ["completed", "suspended"])
def test_a_run_that_completes_or_suspends_leaves_its_children_alone(status: RunOutcome) -> None:
    k = make()
    started(k, "p")
    k.handle(RunSubmitted("p.1", parent_run_id="p"), 0.0)
    assert k.handle(RunEnded("p", status), 0.0) == []
    assert k.run_state("p.1") is RunState.RUNNING
    assert k.handle(RunEnded("p.1", "completed"), 0.0) == []


def test_a_failed_run_terminates_its_children() -> None:
    k = make()
    started(k, "p")
    k.handle(RunSubmitted("p.1", parent_run_id="p"), 0.0)
    assert k.handle(RunEnded("p", "failed"), 0.0) == [StopRun("p.1", True, "terminated")]


def test_a_stream_ended_before_its_run_is_left_alone_at_the_end() -> None:
    k = make()
    started(k, "r1")
    k.handle(StreamRequested("m1", owner="r1"), 0.0)
    assert k.stream_owner("m1") == "r1"
    k.handle(TurnEnded("m1"), 0.0)
    assert k.handle(RunEnded("r1", "completed"), 0.0) == []


def test_a_stream_that_timed_out_gets_no_second_terminal_command() -> None:
    k = make(concurrency_limit=1, permit_wait_timeout_s=5)
    started(k, "r1")
    k.handle(StreamRequested("m1", owner="r1"), 0.0)
    k.handle(StreamRequested("m2", owner="r1"), 0.0)
    assert k.handle(Tick(), 5.0) == [FailTurn("m2", "provider_limit_timeout")]
    assert k.handle(RunEnded("r1", "failed"), 5.0) == [CancelTurn("m1", "run_ended")]
    assert k.stream_owner("m1") == "r1"  # until the stream itself ends
    assert k.handle(TurnEnded("m1"), 5.0) == [] and k.handle(TurnEnded("m2"), 5.0) == []
    assert k.statistics().live_turns == 0 and k.statistics().permits_in_use == 0


def test_a_stream_for_a_waiting_or_unknown_run_is_refused() -> None:
    k = make()
    waiting(k, "r1")
    assert k.handle(StreamRequested("m1", owner="r1"), 0.0) == [FailTurn("m1", "run_not_running")]
    assert k.handle(StreamRequested("m2", owner="gone"), 0.0) == [FailTurn("m2", "run_not_running")]
    assert k.handle(TurnEnded("m2"), 0.0) == []  # the runtime's usual TurnEnded is harmless
    assert k.statistics().live_turns == 0


def test_requesting_an_owned_stream_twice_is_a_bug() -> None:
    k = make()
    started(k, "r1")
    k.handle(StreamRequested("m1", owner="r1"), 0.0)
    k.handle(ask("r1"), 0.0)
    with pytest.raises(AssertionError):
        k.handle(StreamRequested("m1", owner="r1"), 0.0)


# -- Tick ---------------------------------------------------------------------------------------


def test_an_unanswered_run_fails_at_its_deadline() -> None:
    k = make()
    waiting(k, "r1", seq=3, deadline_s=10.0)
    waiting(k, "r2", seq=4, deadline_s=5.0)
    assert k.handle(Tick(), 4.99) == []
    assert k.handle(Tick(), 10.0) == [
        ExpireHuman("r2", "r2:4", 4),
        FinishRun("r2", "failed", "human_timeout"),
        ExpireHuman("r1", "r1:3", 3),
        FinishRun("r1", "failed", "human_timeout"),
    ]
    stats = k.statistics()
    assert (stats.waiting_runs, stats.human_deadlines_pending, stats.human_timeouts_total) == (0, 0, 2)
    assert k.next_deadline() is None


def test_a_parent_timing_out_takes_its_waiting_child_with_it() -> None:
    """Both deadlines are due; the child, finished by the cascade, must not expire afterwards."""
    k = make()
    k.handle(HumanRequested("p", "p:1", 1, None, 5.0), 0.0)
    k.handle(HumanRequested("p.1", "p.1:1", 1, None, 6.0, parent_run_id="p"), 0.0)
    assert k.handle(Tick(), 10.0) == [
        ExpireHuman("p", "p:1", 1),
        FinishRun("p", "failed", "human_timeout"),
        FinishRun("p.1", "cancelled", "terminated"),
    ]
    assert k.statistics().human_timeouts_total == 1


def test_run_and_turn_deadlines_share_next_deadline() -> None:
    k = make(concurrency_limit=1, permit_wait_timeout_s=50, session_ttl_s=1000)
    waiting(k, "r1", deadline_s=30.0)
    started(k, "r2")
    k.handle(StreamRequested("m1", owner="r2"), 0.0)
    k.handle(StreamRequested("m2", owner="r2"), 10.0)
    assert k.next_deadline() == 30.0
    k.handle(HumanAnswered("r1", "r1:2"), 0.0)
    assert k.next_deadline() == 60.0


def snapshot(k: Kernel, ids: list[str]) -> object:
    return (
        k.statistics(),
        k.next_deadline(),
        [(k.run_state(i), k.pending_human(i), k.human_deadline(i), k.turn_state(i), k.holds_permit(i)) for i in ids],
    )


@pytest.mark.parametrize(
    "event",
    [
        RunCancelRequested("ghost", hard=True),
        RunCancelRequested("stopping"),
        RunCancelRequested("terminating", hard=True),
        RunCancelRequested("terminating"),
        RunEnded("ghost", "failed"),
        TurnEnded("ghost"),
        ProviderReleased("ghost"),
        ProviderReleased("w"),  # a stream that waits holds nothing to release
        StreamRequested("m9", owner="waiting"),
        StreamRequested("m9", owner="terminating"),
        HumanAnswered("waiting", "waiting:1"),
        HumanAnswered("stopping", "stopping:2"),
        Tick(),
    ],
)
def test_events_that_race_the_kernel_are_answered_and_change_nothing(event: Event) -> None:
    k = make(concurrency_limit=1, max_active_runs=1)
    started(k, "stopping")
    k.handle(StreamRequested("s", owner="stopping"), 0.0)
    k.handle(StreamRequested("w", owner="stopping"), 0.0)
    k.handle(RunCancelRequested("stopping"), 0.0)
    k.handle(RunResumed("terminating"), 0.0)
    k.handle(RunCancelRequested("terminating", hard=True), 0.0)
    k.handle(HumanRequested("waiting", "waiting:2", 2, "h", 50.0), 0.0)
    ids = ["stopping", "terminating", "waiting", "ghost", "s", "w", "m9"]
    before = snapshot(k, ids)
    k.handle(event, 1.0)
    assert snapshot(k, ids) == before
