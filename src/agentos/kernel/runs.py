"""Agent runs: admission, lifecycle, human waits with deadlines, approval binding.

Theory of operation
-------------------
A run is known to the kernel from its admission (or its recovery at start-up) until its task
ends or the kernel finishes it. Its states:

    submitted --(over max_active_runs)--> rejected                   [RejectRun]
    (`RunOffered`, before a run has an id, answers the same `RejectRun`, or nothing)
    submitted | resumed --> running                                   [AcceptRun +] StartRun
    running --(soft cancel)--> stopping                               [StopRun(hard=False)]
    running | stopping --(hard cancel)--> terminating                 [StopRun(hard=True)]
    running --(HumanRequested)--> waiting_human                       (deadline armed)
    stopping | terminating --(HumanRequested)--> gone                 [FinishRun("cancelled")]
    waiting_human --(matching answer)--> running                      [AcceptAnswer, StartRun]
    waiting_human --(RunResumed)--> running                           [StartRun]
    waiting_human --(cancel)--> gone                                  [FinishRun("cancelled")]
    waiting_human --(deadline)--> gone                                [ExpireHuman, FinishRun("failed")]
    running | stopping | terminating --(RunEnded)--> gone

Counting rules:
- `active` counts runs with a task (running, stopping, terminating); a waiting run has no task
  and is not counted. `RunSubmitted` is refused when `active >= max_active_runs` (0 = off),
  except for a child of a working parent: the parent waits for it, so refusing would deadlock.
  Resumed and answered runs are never refused either: they were admitted once already. Hence
  `active` may exceed the limit; only plain submissions are held to it. Each tenant's active
  runs are counted alike (`Tenants.runs`) and held to its `max_active_runs` by the same rule.
- A run's streams (its model calls, `StreamRequested(owner=run_id)`) may be requested only
  while it is running or stopping softly (a soft stop lets the current step finish). When it
  parks, is terminated or ends, its streams are failed (waiting) or cancelled (streaming) and
  detached from it: a waiting run holds no permit. A cancelled stream keeps its permit until the
  runtime reports it released, as any cancelled turn does.
- Every admitted run gets exactly one terminal outcome: a `RunEnded` from its task, or a
  `FinishRun` from the kernel when it has no task (waiting, or parking with a cancel pending).
- The deadline set holds exactly the waiting runs' deadlines: answering, cancelling or ending a
  run removes its deadline at once.

Cancels cascade: cancelling a run cancels its children (runs whose `parent_run_id` it is) with
the same force, a child submitted while its parent is stopping is stopped at once, and a run that
ends failed or cancelled terminates the children it leaves.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Literal

from agentos.kernel.commands import (
    AcceptAnswer,
    AcceptRun,
    Command,
    ExpireHuman,
    FinishRun,
    RejectAnswer,
    RejectRun,
    RunRejection,
    StartRun,
    StopRun,
)
from agentos.kernel.deadlines import DeadlineSet
from agentos.kernel.events import HumanAnswered, HumanRequested, RunOutcome
from agentos.kernel.limits import KernelLimits, refusal
from agentos.kernel.tenants import DEFAULT_TENANT, Tenants
from agentos.kernel.turns import Turns


class RunState(Enum):
    RUNNING = "running"
    STOPPING = "stopping"  # a soft cancel waits for the next step boundary
    TERMINATING = "terminating"  # a hard cancel: the task is being cancelled
    WAITING = "waiting_human"


@dataclass(frozen=True, slots=True)
class PendingHuman:
    """The request a waiting run waits on (from `HumanRequested`)."""

    operation_id: str
    step_seq: int
    args_hash: str | None
    deadline_s: float


class _Run:
    __slots__ = ("parent_run_id", "pending", "state", "streams", "tenant")

    def __init__(self, state: RunState, parent_run_id: str | None, tenant: str) -> None:
        self.state = state
        self.parent_run_id = parent_run_id
        self.tenant = tenant
        self.pending: PendingHuman | None = None
        # Allocated on a run's first model call and dropped when it parks: an empty set is
        # 216 bytes, more than the rest of a waiting run's entry.
        self.streams: set[str] | None = None


class Runs:
    def __init__(self, limits: KernelLimits, turns: Turns, tenants: Tenants) -> None:
        self.limits = limits
        self._turns = turns
        self._tenants = tenants
        self.table: dict[str, _Run] = {}
        self._children: dict[str, set[str]] = {}  # parent run id -> its known children
        self.deadlines = DeadlineSet()
        self.active = self.waiting = 0
        self.admitted = self.rejected = self.timeouts = 0

    # -- queries -------------------------------------------------------------------------------

    def state(self, run_id: str) -> RunState | None:
        run = self.table.get(run_id)
        return run.state if run else None

    def pending(self, run_id: str) -> PendingHuman | None:
        run = self.table.get(run_id)
        return run.pending if run else None

    def may_stream(self, run_id: str) -> bool:
        return self.state(run_id) in (RunState.RUNNING, RunState.STOPPING)

    def add_stream(self, run_id: str, stream_id: str) -> None:
        run = self.table[run_id]
        if run.streams is None:
            run.streams = set()
        run.streams.add(stream_id)

    def drop_stream(self, run_id: str, stream_id: str) -> None:
        run = self.table.get(run_id)
        if run is not None and run.streams is not None:
            run.streams.discard(stream_id)

    # -- transitions ---------------------------------------------------------------------------

    def submit(self, run_id: str, parent_run_id: str | None, tenant: str = DEFAULT_TENANT) -> list[Command]:
        assert run_id not in self.table, f"run {run_id!r} submitted twice"
        parent = self.table.get(parent_run_id) if parent_run_id is not None else None
        working_parent = parent is not None and parent.state is not RunState.WAITING
        rejection = None if working_parent else self._over_limit(tenant)
        if rejection is not None:
            self.rejected += 1
            return [RejectRun(run_id, self.limits.retry_after_s, rejection)]
        self._add(run_id, parent_run_id, RunState.RUNNING, tenant)
        self.admitted += 1
        commands: list[Command] = [AcceptRun(run_id), StartRun(run_id)]
        if parent is not None and parent.state in (RunState.STOPPING, RunState.TERMINATING):
            commands += self.cancel(run_id, hard=parent.state is RunState.TERMINATING)
        return commands

    def offer(self, tenant: str) -> list[Command]:
        """A plain run of `tenant` is on its way in: refused now (and counted) if `submit` would
        refuse it; nothing changes otherwise."""
        rejection = self._over_limit(tenant)
        if rejection is None:
            return []
        self.rejected += 1
        return [RejectRun("", self.limits.retry_after_s, rejection)]

    def _over_limit(self, tenant: str) -> RunRejection | None:
        cap = self._tenants.share(tenant).max_active_runs
        held = self._tenants.runs[tenant]
        return refusal(self.active, self.limits.max_active_runs, held, cap, "tenant_active_runs")

    def resume(self, run_id: str, parent_run_id: str | None, tenant: str = DEFAULT_TENANT) -> list[Command]:
        run = self.table.get(run_id)
        if run is None:
            self._add(run_id, parent_run_id, RunState.RUNNING, tenant)
        else:
            assert run.state is RunState.WAITING, f"run {run_id!r} resumed while {run.state.value}"
            self._wake(run_id, run)
        return [StartRun(run_id)]

    def request_human(self, event: HumanRequested) -> list[Command]:
        run = self.table.get(event.run_id)
        if run is None:  # recovery: the journal says it waits
            run = self._add(event.run_id, event.parent_run_id, RunState.WAITING, event.tenant_id)
            self._arm(event, run)
            return []
        assert run.state is not RunState.WAITING, f"run {event.run_id!r} asked a human twice"
        commands = self._stop_streams(run, "run_parked")
        if run.state is RunState.RUNNING:
            run.state = RunState.WAITING
            self._count(run, -1)
            self.waiting += 1
            self._arm(event, run)
            return commands
        reason = "terminated" if run.state is RunState.TERMINATING else "cancelled"
        return commands + self._finish(event.run_id, "cancelled", reason)

    def _arm(self, event: HumanRequested, run: _Run) -> None:
        run.pending = PendingHuman(event.operation_id, event.step_seq, event.args_hash, event.deadline_s)
        self.deadlines.add(event.run_id, event.deadline_s)

    def answer(self, event: HumanAnswered) -> list[Command]:
        run_id = event.run_id
        run = self.table.get(run_id)
        pending = run.pending if run is not None else None
        if run is None or pending is None:
            return [RejectAnswer(run_id, "not_waiting", f"run {run_id!r} is not waiting for a human")]
        if event.operation_id != pending.operation_id:
            message = f"operation {event.operation_id!r} is not awaiting an answer (pending: {pending.operation_id!r})"
            return [RejectAnswer(run_id, "operation_mismatch", message)]
        if pending.args_hash is not None:  # an approval binds to the exact arguments
            if event.approve is None:
                return [RejectAnswer(run_id, "approval_required", "an approval needs 'approve' and 'args_hash'")]
            if event.args_hash != pending.args_hash:
                message = "args_hash does not match the arguments awaiting approval"
                return [RejectAnswer(run_id, "args_hash_mismatch", message)]
        self._wake(run_id, run)
        return [AcceptAnswer(run_id, pending.operation_id, pending.step_seq), StartRun(run_id)]

    def cancel(self, run_id: str, hard: bool) -> list[Command]:
        run = self.table.get(run_id)
        if run is None:
            return []
        reason = "terminated" if hard else "cancelled"
        commands: list[Command] = []
        if run.state is RunState.WAITING:
            commands += self._finish(run_id, "cancelled", reason)
        elif run.state is RunState.RUNNING or (hard and run.state is RunState.STOPPING):
            run.state = RunState.TERMINATING if hard else RunState.STOPPING
            commands.append(StopRun(run_id, hard, reason))
            if hard:
                commands += self._stop_streams(run, reason)
        for child in sorted(self._children.get(run_id, ())):
            commands += self.cancel(child, hard)
        return commands

    def end(self, run_id: str, status: RunOutcome) -> list[Command]:
        run = self.table.get(run_id)
        if run is None:
            return []
        return self._forget(run_id, run, cascade=status in ("failed", "cancelled"))

    def tick(self, now: float) -> list[Command]:
        commands: list[Command] = []
        while (run_id := self.deadlines.pop_due(now)) is not None:
            pending = self.table[run_id].pending
            assert pending is not None
            self.timeouts += 1
            commands.append(ExpireHuman(run_id, pending.operation_id, pending.step_seq))
            commands += self._finish(run_id, "failed", "human_timeout")
        return commands

    # -- helpers -------------------------------------------------------------------------------

    def _add(self, run_id: str, parent_run_id: str | None, state: RunState, tenant: str) -> _Run:
        run = self.table[run_id] = _Run(state, parent_run_id, tenant)
        if parent_run_id is not None:
            self._children.setdefault(parent_run_id, set()).add(run_id)
        if state is RunState.WAITING:
            self.waiting += 1
        else:
            self._count(run, 1)
        return run

    def _count(self, run: _Run, delta: int) -> None:
        """A run gains (+1) or loses (-1) its task: the server's and its tenant's counts."""
        self.active += delta
        self._tenants.runs.add(run.tenant, delta)

    def _wake(self, run_id: str, run: _Run) -> None:
        self.deadlines.remove(run_id)  # at once: an answered deadline must not linger
        run.pending = None
        run.state = RunState.RUNNING
        self.waiting -= 1
        self._count(run, 1)

    def _finish(self, run_id: str, status: Literal["failed", "cancelled"], reason: str) -> list[Command]:
        finish = FinishRun(run_id, status, reason)
        return [finish, *self._forget(run_id, self.table[run_id], cascade=True)]

    def _forget(self, run_id: str, run: _Run, *, cascade: bool) -> list[Command]:
        del self.table[run_id]
        if run.state is RunState.WAITING:
            self.waiting -= 1
            self.deadlines.remove(run_id)
        else:
            self._count(run, -1)
        commands = self._stop_streams(run, "run_ended")
        if run.parent_run_id is not None:
            siblings = self._children[run.parent_run_id]
            siblings.discard(run_id)
            if not siblings:
                del self._children[run.parent_run_id]
        if cascade:
            for child in sorted(self._children.get(run_id, ())):
                commands += self.cancel(child, hard=True)
        return commands

    def _stop_streams(self, run: _Run, reason: str) -> list[Command]:
        commands: list[Command] = []
        for stream_id in sorted(run.streams or ()):
            commands += self._turns.stop_stream(stream_id, reason)
        run.streams = None
        return commands
