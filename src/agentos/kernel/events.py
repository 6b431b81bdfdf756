"""Inputs to the kernel: things that happened, named in the past tense.

Turn and session events come first, run events after them. Every event is a frozen dataclass;
the runtime builds one, passes it with `now` to `Kernel.handle`, and carries out the commands it
gets back. Each docstring says when the runtime sends it and what the kernel answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agentos.kernel.busy import DEFAULT_ON_BUSY, OnBusy
from agentos.kernel.tenants import DEFAULT_TENANT

RunOutcome = Literal["completed", "failed", "cancelled", "suspended"]
# How a run ends, defined once: its status in the journal (`runs.status`) and its last event
# (`run.<status>`); the journal's SQL, the API, the relay, the client and agent turns read these.
RUN_TERMINAL_STATUSES: tuple[str, ...] = ("completed", "failed", "cancelled")
RUN_TERMINAL_EVENTS: frozenset[str] = frozenset(f"run.{status}" for status in RUN_TERMINAL_STATUSES)
RUN_TERMINAL_SQL = "(" + ", ".join(f"'{status}'" for status in RUN_TERMINAL_STATUSES) + ")"  # for `NOT IN`
"""How a run's task ended. "suspended": it stopped for a shutdown and stays unfinished in the
journal, to be resumed (`RunResumed`) by the next process."""


@dataclass(frozen=True, slots=True)
class TurnSubmitted:
    """A session turn arrives. -> `RejectTurn`, or `AcceptTurn` (+ `CancelTurn` of the session's
    running turn, + `GrantPermit` when a permit is free).

    `wants_permit=False`: a turn run by an agent. It is admitted, counted and superseded like any
    turn but never queues for a permit itself: its run's model calls are streams of their own
    (`StreamRequested(owner=run_id)`).

    `tenant_id`: the session's tenant. Over its `max_concurrent_turns` the turn is refused with
    `RejectTurn(code="tenant_concurrent_turns")`; its permit comes from its tenant's fair share.

    `on_busy`: what it does when the session has an active turn (`busy.py`): replace or
    rollback it (`CancelTurn`), be refused (`RejectTurn("turn_in_progress")`), wait in the
    session's queue (`QueueTurn`, later `AcceptTurn`), or steer the running agent turn
    (`QueueTurn` + `SteerTurn`)."""

    session_id: str
    turn_id: str
    wants_permit: bool = True
    tenant_id: str = DEFAULT_TENANT
    on_busy: OnBusy = DEFAULT_ON_BUSY


@dataclass(frozen=True, slots=True)
class TurnCancelRequested:
    """Cancel one turn by its id: a queued one leaves the queue (`CancelTurn`), the active one
    is cancelled as by `CancelRequested` (the queue then moves on). Unknown or ending: []."""

    turn_id: str
    reason: str = "cancelled"


@dataclass(frozen=True, slots=True)
class SteerClaimed:
    """The running agent turn `into_turn_id` reached its next step and takes the message of the
    queued turn `turn_id` (offered by `SteerTurn`). -> `DeliverSteer` if it is still queued for
    that turn and that turn is still its session's active one; else [] (it was promoted or
    cancelled): a steered message is delivered once, or runs as a turn, never both."""

    turn_id: str
    into_turn_id: str


@dataclass(frozen=True, slots=True)
class TurnOffered:
    """A session turn is on its way in, before its body is read or its session looked up.

    -> `RejectTurn` (with `turn_id` "": it has none yet) when `TurnSubmitted` for the tenant
    would be refused now, counted as a rejection; else nothing. It admits nothing and holds no
    slot: the `TurnSubmitted` that follows decides again (a turn may pass this and still be
    refused). It lets a refusal cost no read, no decoding and no store work."""

    tenant_id: str = DEFAULT_TENANT


@dataclass(frozen=True, slots=True)
class StreamRequested:
    """A provider stream outside any session turn (a run's model call) wants a permit.

    It shares the permit queue with turns but not the admission count; it ends with
    `TurnEnded(stream_id)`. -> `GrantPermit` at once, or nothing (it waits; later `GrantPermit`
    or `FailTurn("provider_limit_timeout")`).

    `owner`: the run it belongs to. An owned stream is refused at once with
    `FailTurn(stream_id, "run_not_running")` (and not recorded) unless that run is running or
    stopping softly; when the run stops, parks or ends, the kernel fails or cancels it.

    `tenant_id`: whose fair share of the permits it draws on (its run's tenant)."""

    stream_id: str
    owner: str | None = None
    tenant_id: str = DEFAULT_TENANT


@dataclass(frozen=True, slots=True)
class ProviderReleased:
    """The turn's provider stream is closed: its permit can go to the next waiter."""

    turn_id: str


@dataclass(frozen=True, slots=True)
class TurnEnded:
    """The turn's (or stream's) task is over, whatever the outcome. Unknown ids are ignored."""

    turn_id: str


@dataclass(frozen=True, slots=True)
class CancelRequested:
    session_id: str
    reason: str = "cancelled"


@dataclass(frozen=True, slots=True)
class SessionOpened:
    """The session is in memory (created, or loaded back from the store)."""

    session_id: str


@dataclass(frozen=True, slots=True)
class SessionClosed:
    """The session was deleted."""

    session_id: str


@dataclass(frozen=True, slots=True)
class Tick:
    """Time passed: fire the deadlines that are due (permit waits, session TTLs, human waits)."""


# -- runs -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunSubmitted:
    """A new run (the runs API, a session turn's agent, or a parent's delegation) wants to start.

    -> `AcceptRun` + `StartRun`, or `RejectRun(retry_after_s)` over `max_active_runs`. A child of
    a running parent (`parent_run_id` names a run the kernel has running) is never refused: the
    parent waits for it, and refusing it could deadlock the parent. Submitting a known id is a
    bug (AssertionError, nothing changed).

    `tenant_id`: the run's tenant; over its `max_active_runs` (same exemptions) the run is
    refused with `RejectRun(code="tenant_active_runs")`."""

    run_id: str
    parent_run_id: str | None = None
    tenant_id: str = DEFAULT_TENANT


@dataclass(frozen=True, slots=True)
class RunOffered:
    """A plain run (no parent) is on its way in, before its body is read: like `TurnOffered`,
    -> `RejectRun` (`run_id` "") when `RunSubmitted` for the tenant would be refused now, else
    nothing; it admits nothing."""

    tenant_id: str = DEFAULT_TENANT


@dataclass(frozen=True, slots=True)
class RunResumed:
    """A known unfinished run continues without an admission check -> `StartRun`.

    Sent at start-up for each run the journal has running (or queued), and for a waiting run
    whose answer the runtime found already journaled. Resuming a run that is running is a bug
    (AssertionError, nothing changed). `tenant_id`: the run's, for its tenant's count."""

    run_id: str
    parent_run_id: str | None = None
    tenant_id: str = DEFAULT_TENANT


@dataclass(frozen=True, slots=True)
class HumanRequested:
    """The run journaled a human request and its task ends: the run waits, holds no task and no
    permit, and its deadline joins the kernel's (`next_deadline()`).

    Sent by a running run (its streams still open are failed or cancelled), or at start-up for a
    run the journal has waiting (it becomes known, waiting). A run with a cancel pending is
    finished at once instead: `FinishRun(run_id, "cancelled", reason)`.

    Attributes:
        operation_id: the request's id, `f"{run_id}:{step_seq}"`.
        step_seq: the journal step that waits.
        args_hash: the hash of the arguments awaiting approval; None when the request is not an
            approval (a question, an uncertain step).
        deadline_s: when it expires, on the kernel's clock (the `now` the runtime passes).
        parent_run_id: the run's parent, so that a restart keeps cancels cascading.
        tenant_id: the run's tenant (read at start-up, when the kernel learns the run here).
    """

    run_id: str
    operation_id: str
    step_seq: int
    args_hash: str | None
    deadline_s: float
    parent_run_id: str | None = None
    tenant_id: str = DEFAULT_TENANT


@dataclass(frozen=True, slots=True)
class HumanAnswered:
    """A human answers. -> `AcceptAnswer` + `StartRun` (the deadline is gone at once), or
    `RejectAnswer(code)`: "not_waiting" (the run waits for nothing), "operation_mismatch" (it
    waits for another operation), "approval_required" (an approval answered without `approve`),
    "args_hash_mismatch" (an approval whose `args_hash` is not the pending one's)."""

    run_id: str
    operation_id: str
    args_hash: str | None = None
    approve: bool | None = None


@dataclass(frozen=True, slots=True)
class RunCancelRequested:
    """Cancel (soft) or terminate (hard) a run and, with the same force, its children.

    Running, soft -> `StopRun(hard=False, reason="cancelled")`; running or stopping, hard ->
    `StopRun(hard=True, reason="terminated")` and its streams are failed or cancelled; waiting ->
    `FinishRun(run_id, "cancelled", reason)` at once. An unknown (finished) run, or a repeat, -> []."""

    run_id: str
    hard: bool = False


@dataclass(frozen=True, slots=True)
class RunEnded:
    """The run's task is over (`status` says how): the kernel forgets the run, frees its count,
    fails or cancels its streams still open, and terminates its children unless it completed or
    was suspended. Unknown runs are ignored."""

    run_id: str
    status: RunOutcome


@dataclass(frozen=True, slots=True)
class TenantConfigured:
    """A tenant's share of the provider permits and its caps (0 = none) -> [].

    Unknown tenants have `KernelLimits.tenant_defaults`. A new weight applies from the next
    grant; new caps from the next admission (nothing admitted is refused afterwards). Two tenants
    configured make the server shared: the fair-share reserve applies (`permits.py`)."""

    tenant_id: str
    weight: int = 1
    max_concurrent_turns: int = 0
    max_active_runs: int = 0


Event = (
    TurnSubmitted
    | TurnOffered
    | StreamRequested
    | ProviderReleased
    | TurnEnded
    | CancelRequested
    | TurnCancelRequested
    | SteerClaimed
    | SessionOpened
    | SessionClosed
    | Tick
    | RunSubmitted
    | RunOffered
    | RunResumed
    | HumanRequested
    | HumanAnswered
    | RunCancelRequested
    | RunEnded
    | TenantConfigured
)
