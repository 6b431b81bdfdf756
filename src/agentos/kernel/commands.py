"""Outputs of the kernel: what the runtime must do, named in the imperative.

Turn commands first, run commands after them. Each docstring says what the runtime must do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agentos.kernel.busy import BusyRefusal

AnswerRejection = Literal["not_waiting", "operation_mismatch", "approval_required", "args_hash_mismatch"]
TurnRejection = Literal["overloaded", "tenant_concurrent_turns"] | BusyRefusal
RunRejection = Literal["overloaded", "tenant_active_runs"]


@dataclass(frozen=True, slots=True)
class RejectTurn:
    """Refused: answer with `code`, start nothing, change nothing.

    `code`: "overloaded" (the server's `max_in_flight_turns`), "tenant_concurrent_turns"
    (the tenant's `max_concurrent_turns`) or "turn_queue_full" (the session's queue is at
    `max_queued_turns_per_session`): 429 with Retry-After; "turn_in_progress" (`on_busy`
    "reject" in a busy session): 409 naming `running_turn_id`. `turn_id` is "" for a
    `TurnOffered`."""

    turn_id: str
    retry_after_s: int
    code: TurnRejection = "overloaded"
    running_turn_id: str = ""  # the session's active turn, for "turn_in_progress"


@dataclass(frozen=True, slots=True)
class AcceptTurn:
    turn_id: str


@dataclass(frozen=True, slots=True)
class GrantPermit:
    """The turn (or stream) may open its provider stream."""

    turn_id: str


@dataclass(frozen=True, slots=True)
class CancelTurn:
    """Stop the turn (or abort the stream): abort its upstream, store its partial output as
    cancelled, then send `ProviderReleased`/`TurnEnded` as usual. `rollback`: remove the turn's
    messages from the transcript instead (`on_busy` "rollback"). A queued turn never started:
    end it as cancelled without running it."""

    turn_id: str
    reason: str
    rollback: bool = False


@dataclass(frozen=True, slots=True)
class QueueTurn:
    """The turn waits in its session's queue (`ahead` turns before it, the active one not
    counted): hold it, run nothing; `AcceptTurn` (its turn came) or `CancelTurn` follows."""

    turn_id: str
    ahead: int


@dataclass(frozen=True, slots=True)
class SteerTurn:
    """Offer the queued turn's message to the running agent turn `into_turn_id`: at its next
    step (before its next model call) that turn sends `SteerClaimed`. If it ends first, the
    queued turn is promoted (`AcceptTurn`) and runs as the next turn."""

    turn_id: str
    into_turn_id: str


@dataclass(frozen=True, slots=True)
class DeliverSteer:
    """The claim holds: add the steered turn's message to `into_turn_id`'s conversation now, and
    end the steered turn as delivered (`turn.steered`). The kernel has forgotten it."""

    turn_id: str
    into_turn_id: str


@dataclass(frozen=True, slots=True)
class FailTurn:
    """End the turn (or stream) as failed before it reached the provider: wake its permit wait
    with an error. It never gets a permit; it still ends with `TurnEnded`."""

    turn_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class EvictSession:
    """The session was idle past its TTL: drop it from memory (the store keeps it)."""

    session_id: str


# -- runs -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AcceptRun:
    """The run is admitted: answer its start call (201/202); `StartRun` follows."""

    run_id: str


@dataclass(frozen=True, slots=True)
class RejectRun:
    """Over `max_active_runs`: answer 429 with Retry-After and `code`; journal and start nothing.

    `code`: "overloaded" (the server's limit) or "tenant_active_runs" (the tenant's). `run_id`
    is "" for a `RunOffered`."""

    run_id: str
    retry_after_s: int
    code: RunRejection = "overloaded"


@dataclass(frozen=True, slots=True)
class StartRun:
    """Start (or restart) the run's task: it replays its journal and works until it ends
    (`RunEnded`) or parks (`HumanRequested`)."""

    run_id: str


@dataclass(frozen=True, slots=True)
class StopRun:
    """Stop the run's task. Soft (`hard=False`): let the current step finish, then end the run
    as cancelled at its next step boundary. Hard: cancel the task now (its streams get
    `CancelTurn`/`FailTurn` of their own). Either way the task ends with `RunEnded`."""

    run_id: str
    hard: bool
    reason: str


@dataclass(frozen=True, slots=True)
class FinishRun:
    """The run, which has no task, ended: journal its terminal status with `reason`, publish
    `run.<status>`, wake whoever waits for it. The kernel has forgotten it; send no `RunEnded`."""

    run_id: str
    status: Literal["failed", "cancelled"]
    reason: str


@dataclass(frozen=True, slots=True)
class AcceptAnswer:
    """The answer binds to the pending request: journal step `step_seq` as answered, publish
    `human.answered`; `StartRun` follows."""

    run_id: str
    operation_id: str
    step_seq: int


@dataclass(frozen=True, slots=True)
class RejectAnswer:
    """The answer does not bind: change nothing; answer 409 ("approval_required": 400) with `code`."""

    run_id: str
    code: AnswerRejection
    message: str


@dataclass(frozen=True, slots=True)
class ExpireHuman:
    """Nobody answered in time: journal step `step_seq` as timed out. `FinishRun(run_id, "failed",
    "human_timeout")` follows."""

    run_id: str
    operation_id: str
    step_seq: int


Command = (
    RejectTurn
    | AcceptTurn
    | GrantPermit
    | CancelTurn
    | QueueTurn
    | SteerTurn
    | DeliverSteer
    | FailTurn
    | EvictSession
    | AcceptRun
    | RejectRun
    | StartRun
    | StopRun
    | FinishRun
    | AcceptAnswer
    | RejectAnswer
    | ExpireHuman
)
