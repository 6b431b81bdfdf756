"""The in-memory face of a run that is not finished: its event sequence, state and task.

A handle is small on purpose: a run waiting for a human keeps only this (no task, no steps,
no thread). `steps` is loaded from the journal when the run becomes active and dropped when
it parks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from agentos.agents.fanout import RunEvent
from agentos.config.agents import AgentSpec
from agentos.journal.journal import RunRow, Step
from agentos.kernel import RUN_TERMINAL_EVENTS

__all__ = ["TERMINAL_EVENTS", "EventType", "RunEvent", "RunHandle", "Steer"]

EventType = Literal[
    "run.started",
    "run.forked",
    "run.resumed",
    "run.child_started",
    "model.started",
    "model.completed",
    "token",
    "tool.call",
    "tool.result",
    "tool.uncertain",
    "human.requested",
    "human.answered",
    "run.steered",
    "run.completed",
    "run.failed",
    "run.cancelled",
]
TERMINAL_EVENTS = RUN_TERMINAL_EVENTS


@dataclass(slots=True, eq=False)
class Steer:
    """A message for the run, taken in at its next step before a model call (`Runner`).

    `claim()` is asked right before it is journaled: False drops it (the session turn that
    sent it was promoted meanwhile, `kernel.queues`). `delivered` resolves with the journal
    step that holds it, or None if it was dropped or the run stopped working first. `key`:
    journaled with it (a steer another node sent: its request, so a new owner after a crash
    finds it taken in already instead of journaling it twice)."""

    text: str
    claim: Callable[[], bool]
    delivered: asyncio.Future[int | None]
    key: str = ""


@dataclass(slots=True, eq=False)
class RunHandle:
    row: RunRow
    spec: AgentSpec
    status: str
    next_event_seq: int
    task: asyncio.Task[None] | None = None
    # Set once the run's row is committed: a new run's task waits for it, so the run does no
    # work before it exists durably, and a burst of start calls is answered before runs work.
    created: asyncio.Future[None] | None = None
    cancel_requested: bool = False  # stop at the next step boundary (the kernel's StopRun)
    stop_reason: str | None = None
    outcome: Literal["completed", "failed", "cancelled", "suspended", "parked"] = "suspended"  # how the task ended
    steps: list[Step] | None = None
    context: list[dict[str, Any]] = field(default_factory=list)  # earlier session messages, before the input
    steers: list[Steer] = field(default_factory=list)  # messages waiting for the run's next step

    @property
    def run_id(self) -> str:
        return self.row.run_id

    def record(self, step: Step) -> None:
        """Keep the in-memory steps in line with what was just journaled."""
        assert self.steps is not None, f"run {self.run_id!r} is not active"
        if step.seq <= len(self.steps):
            self.steps[step.seq - 1] = step
        else:
            assert step.seq == len(self.steps) + 1, "steps are journaled in order"
            self.steps.append(step)
