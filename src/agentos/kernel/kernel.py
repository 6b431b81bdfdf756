"""The kernel: turns, provider permits, sessions and agent runs, as plain logic.

Theory of operation
-------------------
`Kernel.handle(event, now)` is the only entry point. It updates the state and returns the
commands the runtime must carry out; it never waits, never reads a clock and does no I/O, so
the runtime calls it from the event loop without a lock and tests drive it with plain floats.

The work is split by subject, each module with its own theory of operation:

- `permits.py`: the provider permit pool shared by session turns and run streams, by weighted
  fair queuing across tenants;
- `tenants.py`: each tenant's weight and caps, and its counts of turns and runs;
- `turns.py`: session turns and streams (admission, a busy session's queue, permit waits, TTL);
- `busy.py`: what a turn does when its session is busy (replace, reject, enqueue, rollback, steer);
- `queues.py`, `sessions.py`: a busy session's queue and steers; sessions in memory and their TTL;
- `runs.py`: agent runs (admission, lifecycle, human waits and deadlines, approval binding);
- `deadlines.py`: the human deadline set, bounded by the number of waiting runs.

This module only dispatches events and joins the two places where subjects meet: an owned
stream is recorded both as a permit holder (`turns`) and as one of its run's streams (`runs`),
and `Tick` and `next_deadline()` span every deadline.

An event that breaks the kernel's contract (a turn or run id submitted twice, a run resumed or
parked twice) raises AssertionError before anything changes: it is a bug in the runtime.
Events that may race with the kernel's own decisions (ending, releasing, cancelling or
answering something already gone) are answered without a change.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentos.kernel import events
from agentos.kernel.commands import Command, FailTurn
from agentos.kernel.entries import TurnState
from agentos.kernel.limits import KernelLimits
from agentos.kernel.permits import PermitPool
from agentos.kernel.runs import PendingHuman, Runs, RunState
from agentos.kernel.tenants import Tenants, TenantShare
from agentos.kernel.turns import Turns

__all__ = ["Kernel", "KernelLimits", "KernelStatistics", "PendingHuman", "RunState", "TenantUsage", "TurnState"]


@dataclass(frozen=True, slots=True)
class KernelStatistics:
    in_flight_turns: int
    admission_limit: int
    active_sessions: int
    live_turns: int
    permits_in_use: int
    waiting_for_permit: int
    admitted_total: int
    rejected_total: int
    cancelled_total: int
    permit_timeouts_total: int
    evicted_total: int
    active_runs: int  # runs with a task: running, stopping, terminating
    waiting_runs: int  # runs waiting for a human (no task, no permit)
    runs_admitted_total: int
    runs_rejected_total: int
    human_deadlines_pending: int
    human_timeouts_total: int
    run_admission_limit: int  # max_active_runs (0 = off)
    shared: bool  # two tenants configured or seen: the fair-share reserve applies
    tenant_permit_cap: int  # the most permits one tenant may hold now
    queued_turns: int  # turns waiting behind their session's active turn now
    queued_total: int  # turns that ever waited in a session's queue (enqueue, steer)
    steered_total: int  # steered messages delivered to a running agent turn
    busy_refused_total: int  # turns refused for a busy session (turn_in_progress, turn_queue_full)


@dataclass(frozen=True, slots=True)
class TenantUsage:
    """What one tenant holds and waits for now (`Kernel.tenant_usage`)."""

    permits_held: int
    waiting_for_permit: int
    turns_in_flight: int
    active_runs: int


class Kernel:
    def __init__(self, limits: KernelLimits) -> None:
        self.limits = limits
        self._tenants = Tenants(limits.tenant_defaults)
        self._permits = PermitPool(
            limits.concurrency_limit, limits.permit_wait_timeout_s, self._tenants, limits.fair_reserve
        )
        self._turns = Turns(limits, self._permits, self._tenants)
        self._runs = Runs(limits, self._turns, self._tenants)
        turns, runs = self._turns, self._runs
        self._dispatch: dict[type[Any], Callable[[Any, float], list[Command]]] = {
            events.TurnSubmitted: lambda e, now: turns.submit(
                e.session_id, e.turn_id, e.wants_permit, now, e.tenant_id, e.on_busy
            ),
            events.TurnOffered: lambda e, now: turns.offer(e.tenant_id),
            events.StreamRequested: self._request_stream,
            events.ProviderReleased: lambda e, now: turns.release(e.turn_id),
            events.TurnEnded: self._end_turn,
            events.CancelRequested: lambda e, now: turns.cancel_session_turn(e.session_id, e.reason, now),
            events.TurnCancelRequested: lambda e, now: turns.cancel_turn(e.turn_id, e.reason, now),
            events.SteerClaimed: lambda e, now: turns.queues.claim_steer(e.turn_id, e.into_turn_id),
            events.SessionOpened: self._open_session,
            events.SessionClosed: lambda e, now: turns.close_session(e.session_id),
            events.Tick: lambda e, now: turns.tick(now) + runs.tick(now),
            events.RunSubmitted: lambda e, now: runs.submit(e.run_id, e.parent_run_id, e.tenant_id),
            events.RunOffered: lambda e, now: runs.offer(e.tenant_id),
            events.RunResumed: lambda e, now: runs.resume(e.run_id, e.parent_run_id, e.tenant_id),
            events.HumanRequested: lambda e, now: runs.request_human(e),
            events.HumanAnswered: lambda e, now: runs.answer(e),
            events.RunCancelRequested: lambda e, now: runs.cancel(e.run_id, e.hard),
            events.RunEnded: lambda e, now: runs.end(e.run_id, e.status),
            events.TenantConfigured: self._configure_tenant,
        }

    # -- queries -------------------------------------------------------------------------------

    def has_session(self, session_id: str) -> bool:
        return session_id in self._turns.sessions

    def active_turn(self, session_id: str) -> str | None:
        return self._turns.active_turn(session_id)

    def turn_state(self, turn_id: str) -> TurnState | None:
        """The state of a turn or stream; None once it ended (or was never admitted)."""
        return self._turns.state(turn_id)

    def holds_permit(self, turn_id: str) -> bool:
        return self._permits.holds(turn_id)

    def stream_owner(self, stream_id: str) -> str | None:
        return self._turns.owner(stream_id)

    def run_state(self, run_id: str) -> RunState | None:
        """The state of a run; None once it is finished (or was never admitted)."""
        return self._runs.state(run_id)

    def run_tenant(self, run_id: str) -> str | None:
        """The tenant of a run the kernel knows."""
        run = self._runs.table.get(run_id)
        return run.tenant if run is not None else None

    def pending_human(self, run_id: str) -> PendingHuman | None:
        """The human request a waiting run waits on; None for any other run."""
        return self._runs.pending(run_id)

    def human_deadline(self, run_id: str) -> float | None:
        """The run's entry in the deadline set (only waiting runs have one)."""
        return self._runs.deadlines.get(run_id)

    def tenant_share(self, tenant_id: str) -> TenantShare:
        """The tenant's weight and caps (configured, or the defaults)."""
        return self._tenants.share(tenant_id)

    def tenant_usage(self, tenant_id: str) -> TenantUsage:
        tenants = self._tenants
        return TenantUsage(
            permits_held=self._permits.held_by(tenant_id),
            waiting_for_permit=self._permits.waiting_of(tenant_id),
            turns_in_flight=tenants.turns[tenant_id],
            active_runs=tenants.runs[tenant_id],
        )

    def next_deadline(self) -> float | None:
        """The earliest time at which a `Tick` would do something, or None."""
        deadlines = [d for d in (self._turns.next_deadline(), self._runs.deadlines.next()) if d is not None]
        return min(deadlines) if deadlines else None

    def statistics(self) -> KernelStatistics:
        turns, runs = self._turns, self._runs
        return KernelStatistics(
            in_flight_turns=turns.in_flight,
            admission_limit=self.limits.max_in_flight_turns,
            active_sessions=len(turns.sessions),
            live_turns=len(turns.table),
            permits_in_use=self._permits.in_use,
            waiting_for_permit=self._permits.waiting,
            admitted_total=turns.admitted,
            rejected_total=turns.rejected,
            cancelled_total=turns.cancelled,
            permit_timeouts_total=turns.timeouts,
            evicted_total=turns.evicted,
            active_runs=runs.active,
            waiting_runs=runs.waiting,
            runs_admitted_total=runs.admitted,
            runs_rejected_total=runs.rejected,
            human_deadlines_pending=len(runs.deadlines),
            human_timeouts_total=runs.timeouts,
            run_admission_limit=self.limits.max_active_runs,
            shared=self._tenants.multi,
            tenant_permit_cap=self._permits.tenant_cap,
            queued_turns=turns.sessions.queued_now,
            queued_total=turns.queues.queued,
            steered_total=turns.queues.steered,
            busy_refused_total=turns.refused_busy,
        )

    # -- the one entry point -------------------------------------------------------------------

    def handle(self, event: events.Event, now: float) -> list[Command]:
        """Apply `event` at time `now`; return the commands the runtime must carry out, in order.

        Raises:
            AssertionError: the event breaks the kernel's contract (see the module docstring);
                the state is unchanged.
        """
        return self._dispatch[type(event)](event, now)

    def _request_stream(self, event: events.StreamRequested, now: float) -> list[Command]:
        owner = event.owner
        if owner is None:
            return self._turns.request_stream(event.stream_id, None, now, event.tenant_id)
        if not self._runs.may_stream(owner):
            assert self._turns.state(event.stream_id) is None, f"stream {event.stream_id!r} requested twice"
            return [FailTurn(event.stream_id, "run_not_running")]
        commands = self._turns.request_stream(event.stream_id, owner, now, event.tenant_id)
        self._runs.add_stream(owner, event.stream_id)
        return commands

    def _end_turn(self, event: events.TurnEnded, now: float) -> list[Command]:
        owner = self._turns.owner(event.turn_id)
        if owner is not None:
            self._runs.drop_stream(owner, event.turn_id)
        return self._turns.end(event.turn_id, now)

    def _open_session(self, event: events.SessionOpened, now: float) -> list[Command]:
        self._turns.touch(event.session_id, now)
        return []

    def _configure_tenant(self, event: events.TenantConfigured, now: float) -> list[Command]:
        share = TenantShare(event.weight, event.max_concurrent_turns, event.max_active_runs)
        self._tenants.configure(event.tenant_id, share)
        return []  # a new weight or cap frees nothing: the next grant or admission uses it
