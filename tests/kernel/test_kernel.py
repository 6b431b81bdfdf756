"""The kernel's transition table, driven with plain floats for time: no loop, no sleeps."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from agentos.kernel import (
    AcceptRun,
    AcceptTurn,
    CancelRequested,
    CancelTurn,
    EvictSession,
    FailTurn,
    GrantPermit,
    Kernel,
    KernelLimits,
    ProviderReleased,
    RejectTurn,
    RunSubmitted,
    SessionClosed,
    SessionOpened,
    StartRun,
    StreamRequested,
    Tick,
    TurnEnded,
    TurnState,
    TurnSubmitted,
)


def make(**limits: Any) -> Kernel:
    return Kernel(KernelLimits(**limits))


def test_a_turn_is_accepted_and_granted_a_permit() -> None:
    k = make()
    assert k.handle(TurnSubmitted("s1", "t1"), now=0.0) == [AcceptTurn("t1"), GrantPermit("t1")]
    assert k.active_turn("s1") == "t1"
    assert k.turn_state("t1") is TurnState.STREAMING
    assert k.statistics().in_flight_turns == 1


def test_last_wins_cancels_the_running_turn_and_never_queues() -> None:
    k = make(concurrency_limit=4)
    k.handle(TurnSubmitted("s1", "t1"), now=0.0)
    commands = k.handle(TurnSubmitted("s1", "t2"), now=1.0)
    assert commands[0] == CancelTurn("t1", "superseded")
    assert AcceptTurn("t2") in commands and GrantPermit("t2") in commands
    assert k.active_turn("s1") == "t2"
    assert k.turn_state("t1") is TurnState.CANCELLING
    assert k.statistics().in_flight_turns == 1
    assert k.statistics().permits_in_use == 2  # the cancelled upstream is busy until released
    k.handle(ProviderReleased("t1"), now=1.1)
    k.handle(TurnEnded("t1"), now=1.1)
    assert k.active_turn("s1") == "t2"  # the old turn ending does not clear the new one
    assert k.statistics().permits_in_use == 1


def test_admission_rejects_over_the_limit_without_touching_the_running_turn() -> None:
    k = make(max_in_flight_turns=1, retry_after_s=2)
    k.handle(TurnSubmitted("s1", "t1"), now=0.0)
    assert k.handle(TurnSubmitted("s2", "t2"), now=0.0) == [RejectTurn("t2", 2)]
    assert k.turn_state("t2") is None
    assert k.active_turn("s1") == "t1"
    assert k.statistics().rejected_total == 1


def test_a_rejected_turn_never_cancels_the_running_turn_of_its_session() -> None:
    k = make(max_in_flight_turns=1, session_ttl_s=10)
    k.handle(TurnSubmitted("s1", "t1"), now=0.0)
    assert k.handle(TurnSubmitted("s1", "t2"), now=5.0) == [RejectTurn("t2", 1)]
    assert k.active_turn("s1") == "t1" and k.turn_state("t1") is TurnState.STREAMING
    assert k.statistics().in_flight_turns == 1


def test_below_the_limit_a_replacing_turn_is_admitted() -> None:
    k = make(max_in_flight_turns=2)
    k.handle(TurnSubmitted("s1", "t1"), now=0.0)
    commands = k.handle(TurnSubmitted("s1", "t2"), now=0.0)
    assert CancelTurn("t1", "superseded") in commands and AcceptTurn("t2") in commands
    assert k.statistics().in_flight_turns == 1


def test_permits_queue_in_order_and_are_handed_on_release() -> None:
    k = make(concurrency_limit=1)
    k.handle(TurnSubmitted("s1", "t1"), now=0.0)
    assert k.handle(TurnSubmitted("s2", "t2"), now=0.0) == [AcceptTurn("t2")]
    assert k.handle(TurnSubmitted("s3", "t3"), now=0.0) == [AcceptTurn("t3")]
    assert k.turn_state("t2") is TurnState.WAITING
    assert k.handle(ProviderReleased("t1"), now=1.0) == [GrantPermit("t2")]
    assert k.handle(ProviderReleased("t1"), now=1.0) == []  # releasing twice is harmless
    assert k.handle(TurnEnded("t2"), now=2.0) == [GrantPermit("t3")]


def test_a_waiting_turn_fails_at_its_permit_deadline() -> None:
    k = make(concurrency_limit=1, permit_wait_timeout_s=5)
    k.handle(TurnSubmitted("s1", "t1"), now=0.0)
    k.handle(TurnSubmitted("s2", "t2"), now=1.0)
    assert k.next_deadline() == 6.0
    assert k.handle(Tick(), now=5.9) == []
    assert k.handle(Tick(), now=6.0) == [FailTurn("t2", "provider_limit_timeout")]
    assert k.statistics().in_flight_turns == 1
    assert k.handle(ProviderReleased("t1"), now=7.0) == []  # the failed waiter gets nothing
    assert k.statistics().permit_timeouts_total == 1


def test_a_cancelled_waiter_is_skipped_when_a_permit_frees() -> None:
    k = make(concurrency_limit=1)
    k.handle(TurnSubmitted("s1", "t1"), now=0.0)
    k.handle(TurnSubmitted("s2", "t2"), now=0.0)
    k.handle(TurnSubmitted("s3", "t3"), now=0.0)
    assert k.handle(CancelRequested("s2"), now=0.5) == [CancelTurn("t2", "cancelled")]
    assert k.handle(ProviderReleased("t1"), now=1.0) == [GrantPermit("t3")]


def test_cancel_with_nothing_running_does_nothing() -> None:
    k = make()
    k.handle(SessionOpened("s1"), now=0.0)
    assert k.handle(CancelRequested("s1"), now=0.0) == []
    assert k.handle(CancelRequested("nope"), now=0.0) == []
    k.handle(TurnSubmitted("s1", "t1"), now=0.0)
    k.handle(CancelRequested("s1"), now=0.0)
    assert k.handle(CancelRequested("s1"), now=0.0) == []  # already cancelling


def test_idle_sessions_expire_after_the_ttl_and_busy_ones_do_not() -> None:
    k = make(session_ttl_s=10)
    k.handle(SessionOpened("idle"), now=0.0)
    k.handle(TurnSubmitted("busy", "t1"), now=0.0)
    assert k.next_deadline() == 10.0
    assert k.handle(Tick(), now=9.99) == []
    assert k.handle(Tick(), now=10.0) == [EvictSession("idle")]
    assert k.has_session("busy") and not k.has_session("idle")
    k.handle(TurnEnded("t1"), now=12.0)
    assert k.handle(Tick(), now=21.9) == []
    assert k.handle(Tick(), now=22.0) == [EvictSession("busy")]
    assert k.statistics().evicted_total == 2
    assert k.next_deadline() is None


def test_activity_postpones_expiry() -> None:
    k = make(session_ttl_s=10)
    k.handle(SessionOpened("a"), now=0.0)
    k.handle(SessionOpened("b"), now=1.0)
    k.handle(SessionOpened("a"), now=5.0)
    assert k.handle(Tick(), now=11.0) == [EvictSession("b")]
    assert k.handle(Tick(), now=15.0) == [EvictSession("a")]


def test_deleting_a_session_cancels_its_turn() -> None:
    k = make()
    k.handle(TurnSubmitted("s1", "t1"), now=0.0)
    assert k.handle(SessionClosed("s1"), now=1.0) == [CancelTurn("t1", "session_deleted")]
    assert not k.has_session("s1")
    k.handle(ProviderReleased("t1"), now=1.0)
    assert k.handle(TurnEnded("t1"), now=1.0) == []
    assert k.statistics().live_turns == 0
    assert not k.has_session("s1")  # ending a turn does not resurrect a deleted session


def test_ending_an_unknown_turn_is_harmless() -> None:
    k = make()
    assert k.handle(TurnEnded("ghost"), now=0.0) == []
    assert k.handle(ProviderReleased("ghost"), now=0.0) == []


def test_submitting_the_same_turn_twice_is_a_bug() -> None:
    k = make()
    k.handle(TurnSubmitted("s1", "t1"), now=0.0)
    with pytest.raises(AssertionError):
        k.handle(TurnSubmitted("s1", "t1"), now=0.0)


def test_limits_are_validated() -> None:
    with pytest.raises(AssertionError):
        KernelLimits(concurrency_limit=0)


def test_the_kernel_imports_only_the_stdlib_and_itself() -> None:
    """The layer rule: kernel/ does no I/O, so it imports nothing that could."""
    allowed = {
        "__future__",
        "collections",
        "dataclasses",
        "enum",
        "heapq",
        "math",
        "typing",
        "agentos.kernel",
        "agentos.errors",
    }
    kernel_dir = Path(__file__).parents[2] / "src" / "agentos" / "kernel"
    for path in kernel_dir.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            for name in names:
                assert any(name == a or name.startswith(a + ".") for a in allowed), f"{path.name} imports {name}"


def test_run_streams_share_the_permits_with_turns_but_not_the_gate() -> None:
    k = make(concurrency_limit=1, max_in_flight_turns=1, permit_wait_timeout_s=5)
    assert k.handle(StreamRequested("r1"), now=0.0) == [GrantPermit("r1")]
    assert k.statistics().in_flight_turns == 0  # a run's model call is not a session's turn
    assert k.handle(TurnSubmitted("s1", "t1"), now=0.0) == [AcceptTurn("t1")]  # waits for the permit
    assert k.handle(StreamRequested("r2"), now=1.0) == []  # queued behind the turn
    assert k.handle(TurnEnded("r1"), now=2.0) == [GrantPermit("t1")]
    assert k.handle(Tick(), now=6.0) == [FailTurn("r2", "provider_limit_timeout")]
    assert k.handle(TurnEnded("r2"), now=6.0) == []
    k.handle(TurnEnded("t1"), now=7.0)
    stats = k.statistics()
    assert (stats.permits_in_use, stats.live_turns, stats.in_flight_turns) == (0, 0, 0)


def test_an_agent_turn_never_queues_and_its_run_stream_gets_the_freed_permit() -> None:
    """Defect 1 of issue #7: the agent turn used to queue for a permit it would never use, take
    the one `t1` released, and keep it for the whole run; its run's model call starved."""
    k = make(concurrency_limit=1, permit_wait_timeout_s=5)
    assert k.handle(TurnSubmitted("s1", "t1"), now=0.0) == [AcceptTurn("t1"), GrantPermit("t1")]
    assert k.handle(TurnSubmitted("s2", "t2", wants_permit=False), now=0.0) == [AcceptTurn("t2")]
    assert k.turn_state("t2") is TurnState.RUNNING
    assert k.statistics().in_flight_turns == 2  # counted like any turn
    assert k.handle(RunSubmitted("r2"), now=0.0) == [AcceptRun("r2"), StartRun("r2")]
    assert k.handle(StreamRequested("r2.m1", owner="r2"), now=0.1) == []  # behind t1
    assert k.handle(ProviderReleased("t2"), now=0.1) == []  # the agent turn holds nothing to release
    assert k.handle(ProviderReleased("t1"), now=0.2) == [GrantPermit("r2.m1")]
    assert not k.holds_permit("t2") and k.holds_permit("r2.m1")
    assert k.handle(Tick(), now=10.0) == []  # nothing waited long enough to fail
    assert k.turn_state("t2") is TurnState.RUNNING and k.statistics().in_flight_turns == 2


def test_an_agent_turn_is_superseded_and_gated_like_any_turn() -> None:
    k = make(max_in_flight_turns=1)
    k.handle(TurnSubmitted("s1", "t1", wants_permit=False), now=0.0)
    assert k.handle(TurnSubmitted("s2", "t2"), now=0.0) == [RejectTurn("t2", 1)]
    k.handle(SessionOpened("s1"), now=0.0)
    assert k.handle(CancelRequested("s1"), now=1.0) == [CancelTurn("t1", "cancelled")]
    assert k.turn_state("t1") is TurnState.CANCELLING and k.statistics().in_flight_turns == 0


def test_a_cancelled_waiter_leaves_the_line_at_once() -> None:
    k = make(concurrency_limit=1)
    k.handle(TurnSubmitted("s1", "t1"), now=0.0)
    k.handle(TurnSubmitted("s2", "t2"), now=0.0)
    assert k.statistics().waiting_for_permit == 1
    k.handle(CancelRequested("s2"), now=0.0)
    assert k.statistics().waiting_for_permit == 0
    assert k.next_deadline() == 300.0  # only the session TTL is left, no stale permit deadline
    k.handle(TurnEnded("t2"), now=0.0)
    assert k.handle(TurnEnded("t1"), now=0.0) == []
    assert k.statistics().permits_in_use == 0


def test_a_waiting_turn_that_ends_leaves_the_line() -> None:
    k = make(concurrency_limit=1)
    k.handle(TurnSubmitted("s1", "t1"), now=0.0)
    k.handle(TurnSubmitted("s2", "t2"), now=0.0)
    k.handle(TurnSubmitted("s3", "t3"), now=0.0)
    k.handle(TurnEnded("t2"), now=0.0)  # its task died while it waited
    assert k.handle(ProviderReleased("t1"), now=1.0) == [GrantPermit("t3")]


def test_kernel_modules_stay_small() -> None:
    """One job per module (STYLE.md): none grows past 300 lines."""
    kernel_dir = Path(__file__).parents[2] / "src" / "agentos" / "kernel"
    for path in kernel_dir.glob("*.py"):
        assert len(path.read_text().splitlines()) <= 300, path.name
