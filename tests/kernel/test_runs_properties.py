"""Hypothesis drives runs, their streams and session turns through one kernel, restarts included.

The machine plays the runtime: it carries out every command, keeps a model of what each run
and stream should be, and checks the kernel against it after every step.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from agentos.kernel import (
    AcceptAnswer,
    AcceptRun,
    AcceptTurn,
    CancelTurn,
    Command,
    EvictSession,
    ExpireHuman,
    FailTurn,
    FinishRun,
    GrantPermit,
    HumanAnswered,
    HumanRequested,
    Kernel,
    KernelLimits,
    ProviderReleased,
    RejectAnswer,
    RejectRun,
    RejectTurn,
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
    TurnSubmitted,
)

LIMITS = KernelLimits(
    max_in_flight_turns=3, concurrency_limit=2, session_ttl_s=50, permit_wait_timeout_s=20, max_active_runs=2
)
WORKING = ("running", "stopping", "terminating")  # states with a task
STATE = {
    "running": RunState.RUNNING,
    "stopping": RunState.STOPPING,
    "terminating": RunState.TERMINATING,
    "waiting": RunState.WAITING,
}


@dataclass
class Run:
    state: str
    via: str  # "plain": admitted through the gate; "exempt": child, resumed or answered
    parent: str | None
    operation_id: str = ""
    step_seq: int = 0
    args_hash: str | None = None
    deadline_s: float = 0.0
    next_seq: int = 1


class RunMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.kernel = Kernel(LIMITS)
        self.now = 0.0
        self.next_id = 0
        self.runs: dict[str, Run] = {}  # runs the kernel should know
        self.seen: set[str] = set()  # every run id ever used
        self.admitted: set[str] = set()  # ever, over restarts
        self.outcomes: dict[str, int] = {}  # run -> terminal outcomes (FinishRun or RunEnded)
        self.live: set[str] = set()  # turns and streams recorded by the kernel, not yet ended
        self.owner: dict[str, str] = {}  # stream -> run
        self.streaming: set[str] = set()  # granted and not yet released
        self.stopped: set[str] = set()  # turns and streams told to cancel or fail
        self.totals = {"admitted": 0, "rejected": 0, "timeouts": 0}  # since the last restart
        self.doomed: set[str] = set()  # runs ended failed or cancelled since the last restart

    def new_id(self, prefix: str) -> str:
        self.next_id += 1
        return f"{prefix}{self.next_id}"

    def apply(self, commands: list[Command]) -> None:
        for c in commands:
            match c:
                case AcceptRun(r):
                    self.admitted.add(r)
                    self.totals["admitted"] += 1
                case StartRun(r):
                    assert self.runs[r].state == "running"
                case RejectRun(r, _):
                    self.totals["rejected"] += 1
                case StopRun(r, hard, _):
                    assert self.runs[r].state in WORKING, "StopRun for a run without a task"
                    self.runs[r].state = "terminating" if hard else "stopping"
                case FinishRun(r, _, _):
                    assert self.runs[r].state == "waiting", "FinishRun for a run whose task goes on"
                    self.finish(r)
                    self.doomed.add(r)
                case ExpireHuman(r, operation_id, step_seq):
                    run = self.runs[r]
                    assert (run.state, run.operation_id, run.step_seq) == ("waiting", operation_id, step_seq)
                    assert self.now >= run.deadline_s
                    self.totals["timeouts"] += 1
                case GrantPermit(t):
                    assert t in self.live and t not in self.stopped
                    self.streaming.add(t)
                case CancelTurn(t, _):
                    assert t in self.live and t not in self.stopped
                    self.stopped.add(t)
                case FailTurn(t, _):
                    assert t in self.live and t not in self.stopped and t not in self.streaming
                    self.stopped.add(t)
                case AcceptTurn(t):
                    self.live.add(t)
                case RejectTurn() | EvictSession():
                    pass
                case _:  # pragma: no cover
                    raise AssertionError(f"unexpected command {c!r}")

    def finish(self, run_id: str) -> None:
        del self.runs[run_id]
        self.outcomes[run_id] = self.outcomes.get(run_id, 0) + 1

    def pick(self, data: st.DataObject, states: tuple[str, ...], ghost: bool = False) -> str:
        choices = sorted(r for r, run in self.runs.items() if run.state in states)
        if ghost:
            choices += sorted(self.seen - set(self.runs))[:3] + ["ghost"]
        return data.draw(st.sampled_from(choices))

    def has(self, *states: str) -> bool:
        return any(run.state in states for run in self.runs.values())

    # -- runs ----------------------------------------------------------------------------------

    @rule(data=st.data(), child=st.booleans())
    def submit(self, data: st.DataObject, child: bool) -> None:
        parent = self.pick(data, (*WORKING, "waiting")) if child and self.runs else None
        run_id = self.new_id(f"{parent}." if parent else "r")
        self.seen.add(run_id)
        exempt = parent is not None and self.runs[parent].state in WORKING
        active = sum(run.state in WORKING for run in self.runs.values())
        commands = self.kernel.handle(RunSubmitted(run_id, parent), self.now)
        if active >= LIMITS.max_active_runs and not exempt:
            assert commands == [RejectRun(run_id, LIMITS.retry_after_s)]
        else:
            assert commands[:2] == [AcceptRun(run_id), StartRun(run_id)]
            self.runs[run_id] = Run("running", "exempt" if exempt else "plain", parent)
        self.apply(commands)

    @precondition(lambda self: self.has(*WORKING))
    @rule(data=st.data(), args_hash=st.sampled_from([None, "h1", "h2"]), wait_s=st.floats(1, 100))
    def ask_human(self, data: st.DataObject, args_hash: str | None, wait_s: float) -> None:
        """The run's task parks; a run told to stop may race to park all the same."""
        run_id = self.pick(data, WORKING)
        run = self.runs[run_id]
        seq, run.next_seq = run.next_seq, run.next_seq + 1
        event = HumanRequested(run_id, f"{run_id}:{seq}", seq, args_hash, self.now + wait_s, run.parent)
        was = run.state
        run.state = "waiting"  # no task from here
        run.operation_id, run.step_seq, run.args_hash, run.deadline_s = (
            event.operation_id,
            seq,
            args_hash,
            event.deadline_s,
        )
        commands = self.kernel.handle(event, self.now)
        if was != "running":
            reason = "terminated" if was == "terminating" else "cancelled"
            assert FinishRun(run_id, "cancelled", reason) in commands
        self.apply(commands)
        for stream, owner in self.owner.items():  # a waiting run holds no permit
            if owner == run_id and stream in self.live:
                assert stream in self.stopped

    @rule(
        data=st.data(),
        right_op=st.booleans(),
        args_hash=st.sampled_from([None, "h1", "h2"]),
        approve=st.sampled_from([None, True, False]),
    )
    def answer(self, data: st.DataObject, right_op: bool, args_hash: str | None, approve: bool | None) -> None:
        run_id = self.pick(data, ("waiting", "running"), ghost=True)
        run = self.runs.get(run_id)
        operation_id = run.operation_id if run and right_op else f"{run_id}:0"
        commands = self.kernel.handle(HumanAnswered(run_id, operation_id, args_hash, approve), self.now)
        if run is None or run.state != "waiting":
            expected = "not_waiting"
        elif not right_op:
            expected = "operation_mismatch"
        elif run.args_hash is not None and approve is None:
            expected = "approval_required"
        elif run.args_hash is not None and args_hash != run.args_hash:
            expected = "args_hash_mismatch"
        else:
            assert commands == [AcceptAnswer(run_id, operation_id, run.step_seq), StartRun(run_id)]
            run.state, run.via = "running", "exempt"
            return
        assert len(commands) == 1 and isinstance(commands[0], RejectAnswer) and commands[0].code == expected

    @rule(data=st.data(), hard=st.booleans())
    def cancel(self, data: st.DataObject, hard: bool) -> None:
        run_id = self.pick(data, (*WORKING, "waiting"), ghost=True)
        run = self.runs.get(run_id)
        was = run.state if run else None
        commands = self.kernel.handle(RunCancelRequested(run_id, hard), self.now)
        reason = "terminated" if hard else "cancelled"
        if was == "waiting":
            assert commands[0] == FinishRun(run_id, "cancelled", reason)
        elif was == "running" or (hard and was == "stopping"):
            assert commands[0] == StopRun(run_id, hard, reason)
        else:
            assert commands == []
        self.apply(commands)

    @precondition(lambda self: self.has(*WORKING))
    @rule(data=st.data(), status=st.sampled_from(["completed", "failed", "cancelled"]))
    def end_run(self, data: st.DataObject, status: RunOutcome) -> None:
        run_id = self.pick(data, WORKING)
        self.finish(run_id)
        if status != "completed":
            self.doomed.add(run_id)
        self.apply(self.kernel.handle(RunEnded(run_id, status), self.now))

    @rule(data=st.data())
    def restart(self, data: st.DataObject) -> None:
        """The process dies: tasks, streams and turns are gone; the journal has the runs."""
        self.kernel = Kernel(LIMITS)
        self.live.clear()
        self.streaming.clear()
        self.totals = dict.fromkeys(self.totals, 0)
        self.doomed.clear()  # the journal knows no pending stop: every unfinished run resumes
        for run_id in data.draw(st.permutations(sorted(self.runs))):
            run = self.runs[run_id]
            if run.state == "waiting":
                event = HumanRequested(
                    run_id, run.operation_id, run.step_seq, run.args_hash, run.deadline_s, run.parent
                )
                assert self.kernel.handle(event, self.now) == []
            else:
                run.state, run.via = "running", "exempt"
                assert self.kernel.handle(RunResumed(run_id, run.parent), self.now) == [StartRun(run_id)]

    # -- streams and turns ---------------------------------------------------------------------

    @rule(data=st.data())
    def request_stream(self, data: st.DataObject) -> None:
        owner = self.pick(data, (*WORKING, "waiting"), ghost=True)
        stream = self.new_id("m")
        commands = self.kernel.handle(StreamRequested(stream, owner), self.now)
        run = self.runs.get(owner)
        if run is None or run.state not in ("running", "stopping"):
            assert commands == [FailTurn(stream, "run_not_running")]
            assert self.kernel.turn_state(stream) is None
            return
        self.live.add(stream)
        self.owner[stream] = owner
        self.apply(commands)

    @rule(session=st.sampled_from(["s0", "s1"]), wants_permit=st.booleans())
    def submit_turn(self, session: str, wants_permit: bool) -> None:
        turn = self.new_id("t")
        self.apply(self.kernel.handle(TurnSubmitted(session, turn, wants_permit), self.now))

    @precondition(lambda self: self.streaming)
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        stream = data.draw(st.sampled_from(sorted(self.streaming)))
        self.streaming.discard(stream)
        self.apply(self.kernel.handle(ProviderReleased(stream), self.now))

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def end_stream(self, data: st.DataObject) -> None:
        stream = data.draw(st.sampled_from(sorted(self.live)))
        self.live.discard(stream)
        self.streaming.discard(stream)
        self.apply(self.kernel.handle(TurnEnded(stream), self.now))

    # -- time ----------------------------------------------------------------------------------

    @rule(dt=st.floats(min_value=0, max_value=30))
    def advance(self, dt: float) -> None:
        self.now += dt
        self.apply(self.kernel.handle(Tick(), self.now))

    @precondition(lambda self: self.kernel.next_deadline() is not None)
    @rule()
    def jump_to_deadline(self) -> None:
        deadline = self.kernel.next_deadline()
        assert deadline is not None
        self.now = max(self.now, deadline)
        self.apply(self.kernel.handle(Tick(), self.now))

    # -- invariants ----------------------------------------------------------------------------

    @invariant()
    def permits_within_the_limit_and_accounted(self) -> None:
        stats = self.kernel.statistics()
        assert stats.permits_in_use <= LIMITS.concurrency_limit
        assert stats.permits_in_use == len(self.streaming)
        assert stats.live_turns == len(self.live)

    @invariant()
    def a_run_without_a_task_holds_no_permit(self) -> None:
        """A permit still held (not yet told to stop) belongs to a run that is working."""
        for stream in self.streaming - self.stopped:
            owner = self.owner.get(stream)
            if owner is not None:
                run = self.runs.get(owner)
                assert run is not None and run.state in ("running", "stopping"), f"{stream} of {owner}"

    @invariant()
    def plain_admissions_stay_within_max_active_runs(self) -> None:
        plain = sum(run.state in WORKING and run.via == "plain" for run in self.runs.values())
        assert plain <= LIMITS.max_active_runs

    @invariant()
    def stops_cascade_to_children(self) -> None:
        """A stopping parent's children stop too, a terminating one's are terminated, and a run
        that ended failed or cancelled leaves no child working or waiting on."""
        for run_id, run in self.runs.items():
            parent = self.runs.get(run.parent) if run.parent else None
            if parent is not None and parent.state == "stopping":
                assert run.state in ("stopping", "terminating"), f"{run_id} {run.state} under a stopping parent"
            if (parent is not None and parent.state == "terminating") or run.parent in self.doomed:
                assert run.state == "terminating", f"{run_id} {run.state} under a terminated parent"

    @invariant()
    def at_most_one_terminal_outcome_per_run(self) -> None:
        assert all(n == 1 for n in self.outcomes.values())
        assert not set(self.outcomes) & set(self.runs)

    @invariant()
    def deadlines_exactly_for_waiting_runs(self) -> None:
        for run_id in self.seen:
            run = self.runs.get(run_id)
            expected = run.deadline_s if run is not None and run.state == "waiting" else None
            assert self.kernel.human_deadline(run_id) == expected
            assert self.kernel.run_state(run_id) is (STATE[run.state] if run else None)

    @invariant()
    def statistics_match_the_model(self) -> None:
        stats = self.kernel.statistics()
        waiting = sum(run.state == "waiting" for run in self.runs.values())
        assert stats.active_runs == len(self.runs) - waiting
        assert stats.waiting_runs == stats.human_deadlines_pending == waiting
        assert stats.runs_admitted_total == self.totals["admitted"]
        assert stats.runs_rejected_total == self.totals["rejected"]
        assert stats.human_timeouts_total == self.totals["timeouts"]

    def teardown(self) -> None:
        """End every task and cancel every wait: each admitted run had exactly one outcome,
        and the kernel is back to zero."""
        while self.runs:
            run_id = min(self.runs)
            if self.runs[run_id].state == "waiting":
                self.apply(self.kernel.handle(RunCancelRequested(run_id, hard=True), self.now))
            else:
                self.finish(run_id)
                self.apply(self.kernel.handle(RunEnded(run_id, "cancelled"), self.now))
        for stream in sorted(self.live):
            self.apply(self.kernel.handle(TurnEnded(stream), self.now))
        assert all(self.outcomes.get(r) == 1 for r in self.admitted)
        stats = self.kernel.statistics()
        assert (stats.active_runs, stats.waiting_runs, stats.human_deadlines_pending) == (0, 0, 0)
        assert (stats.permits_in_use, stats.live_turns, stats.waiting_for_permit) == (0, 0, 0)


TestRunMachine = RunMachine.TestCase
TestRunMachine.settings = settings(max_examples=200, stateful_step_count=60, deadline=None)
