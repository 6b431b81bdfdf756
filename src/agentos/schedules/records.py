"""The rows of schedules and their fires."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from agentos.schedules.slots import Cron, Every, Misfire, Timing

Overlap = Literal["skip", "queue"]
# pending: claimed, its run not started yet (just claimed, or queued behind a running fire, or
# refused for now); started: its run exists; finished: that run ended; skipped: never a run
# (overlap, queue_full); failed: its run cannot start (agent_not_found, ...).
FireStatus = Literal["pending", "started", "finished", "skipped", "failed"]


@dataclass(frozen=True, slots=True)
class ScheduleRow:
    schedule_id: str  # random, global ("sch_" + 20 hex)
    tenant_id: str
    agent: str
    input: str  # each fire's run gets this input
    cron: str | None  # five cron fields, in `zone`; None: an `every` schedule
    zone: str
    every_s: int | None
    max_runs_in_flight: int
    overlap: Overlap  # what a slot does when max_runs_in_flight of this schedule's runs still run
    misfire: Misfire
    paused: bool
    created_ms: int
    cursor_ms: int  # the first slot the scheduler has not decided yet: the next fire
    owner: str | None = None  # the end user who made it (its runs are that user's); None: a tenant key

    @property
    def timing(self) -> Timing:
        if self.cron is not None:
            return Cron(self.cron, self.zone)
        assert self.every_s is not None
        return Every(self.every_s, self.created_ms)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schedule_id": self.schedule_id,
            "agent": self.agent,
            "input": self.input,
            "cron": self.cron,
            "time_zone": self.zone,
            "every_s": self.every_s,
            "max_runs_in_flight": self.max_runs_in_flight,
            "overlap": self.overlap,
            "misfire": self.misfire,
            "paused": self.paused,
            "created_ms": self.created_ms,
            "next_fire_ms": None if self.paused else self.cursor_ms,
            "owner": self.owner,
        }


@dataclass(frozen=True, slots=True)
class FireRow:
    """One slot of a schedule, decided once: its (schedule_id, slot_ms) is a unique key, taken
    before the run starts; `run_id` is chosen then, so a start tried again starts nothing new."""

    schedule_id: str
    slot_ms: int
    tenant_id: str
    run_id: str
    status: FireStatus
    updated_ms: int
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        started = self.status in ("started", "finished")
        return {
            "slot_ms": self.slot_ms,
            "run_id": self.run_id if started or self.status == "pending" else None,
            "status": self.status,
            "reason": self.reason,
            "updated_ms": self.updated_ms,
        }


@dataclass(frozen=True, slots=True)
class NextWork:
    """When the scheduler next has work (`ScheduleStorage.next_work`): the earliest cursor of a
    schedule not paused (None: none), whether any fire is pending, and the earliest time a
    pending fire another owner holds can be claimed, just after its lease ends (None: none is
    held; a dead node's fires are taken then)."""

    earliest_ms: int | None
    busy: bool
    lease_end_ms: int | None = None
