"""Where schedules and their fires live: the `ScheduleStorage` protocol.

Two implementations pass the same contract tests: `SqliteScheduleStorage` (`schedules.db`, the
project's writer thread) and `PgScheduleStorage` (migration 0014, the PostgreSQL store's
database, shared by every node).

Exactly once. `advance` moves a schedule's cursor only from the value the caller read (a
compare-and-set) and, in the same transaction, inserts the fires it decided under the unique
key (schedule_id, slot_ms) with `ON CONFLICT DO NOTHING`: two nodes deciding the same slots
race on the cursor, one wins, and even a cursor set back (a restore, a bug) cannot give a slot
a second row. A fire's row, with its run id, is committed before its run is started.

Leases: a pending fire is its claimer's until `lease_until_ms`; `claim` takes those whose lease
ran out (a node that died between the insert and the start), `settle` and `release` change a
fire only while the given owner holds it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any, Protocol

from agentos.schedules.records import FireRow, FireStatus, NextWork, ScheduleRow


class ScheduleStorage(Protocol):
    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def create(self, schedule: ScheduleRow, *, max_per_tenant: int) -> None:
        """Raises: Conflict (`too_many_schedules`)."""
        ...

    async def get(self, tenant_id: str, schedule_id: str) -> ScheduleRow | None: ...

    async def list_schedules(self, tenant_id: str) -> list[ScheduleRow]: ...

    async def delete(self, tenant_id: str, schedule_id: str) -> bool:
        """Delete it and its fires (runs already started are ordinary runs and stay)."""
        ...

    async def set_paused(self, tenant_id: str, schedule_id: str, paused: bool, cursor_ms: int) -> ScheduleRow | None:
        """Pause or resume; the cursor set to `cursor_ms` (a resume skips the paused slots)."""
        ...

    async def due(self, now_ms: int, limit: int) -> list[ScheduleRow]:
        """Schedules not paused whose cursor is at or before `now_ms`, most overdue first."""
        ...

    async def advance(self, schedule: ScheduleRow, cursor_ms: int, fires: Sequence[FireRow], owner: str) -> bool:
        """Move the cursor from `schedule.cursor_ms` to `cursor_ms` and insert `fires` (pending
        ones leased to `owner`): False, nothing written, if the cursor had moved already."""
        ...

    async def active(self, schedule_id: str) -> list[FireRow]:
        """The schedule's pending and started fires, oldest slot first."""
        ...

    async def next_work(self, now_ms: int) -> NextWork:
        """When the scheduler next has work: the earliest cursor of a schedule not paused,
        whether any fire is pending (to start as soon as there is room, or once its lease runs
        out), and when the first lease still held at `now_ms` runs out. A started fire needs
        nothing until its schedule's next slot."""
        ...

    async def claim(self, owner: str, now_ms: int, lease_ms: int, limit: int) -> list[FireRow]:
        """Pending fires whose lease ran out (or was released), oldest slot first; leased to
        `owner` until `now_ms + lease_ms`."""
        ...

    async def settle(
        self, fire: FireRow, status: FireStatus, owner: str | None, now_ms: int, reason: str | None = None
    ) -> None:
        """Set the fire's status (ending its lease; `lease_owner` stays: the node that started
        it) if `owner` holds it (None: whoever does)."""
        ...

    async def release(self, fire: FireRow, owner: str) -> None:
        """Leave it pending for any node's next claim (its run was refused for now, or waits)."""
        ...

    async def fires(self, tenant_id: str, schedule_id: str, limit: int) -> list[FireRow]:
        """The schedule's fires, newest slot first."""
        ...

    async def prune(self, keep: int) -> int:
        """Delete the settled fires of each schedule beyond its newest `keep`; how many."""
        ...


# -- What the two storages share: the columns they read, and how a row becomes a record ---------

SCHEDULE_COLUMNS = (
    "schedule_id, tenant_id, agent, input, cron, zone, every_s, max_runs_in_flight, overlap, misfire, paused,"
    " created_ms, cursor_ms, owner"
)
FIRE_COLUMNS = "schedule_id, slot_ms, tenant_id, run_id, status, updated_ms, reason"
SELECT_SCHEDULES = f"SELECT {SCHEDULE_COLUMNS} FROM schedules"
SELECT_FIRES = f"SELECT {FIRE_COLUMNS} FROM schedule_fires"
_SCHEDULE_VALUES = attrgetter(*SCHEDULE_COLUMNS.split(", "))  # a ScheduleRow's fields are named as its columns
SETTLED = "('finished', 'skipped', 'failed')"
# A fire is inserted leased to the node that decided it, for this long: that node starts it at
# once (milliseconds); should it die first, another node's claim takes the fire after this.
FIRE_LEASE_MS = 10_000


def inserts(mark: Callable[[int], str]) -> tuple[str, str]:
    """The INSERT of a schedule and that of a (leased) fire, the same text on both backends but for
    the driver's placeholder of the n-th value (`$n` for asyncpg, `?` for sqlite3): a fire already
    decided, by this node or another, is left as it is."""

    def values(count: int) -> str:
        return ", ".join(mark(n) for n in range(1, count + 1))

    return (
        f"INSERT INTO schedules ({SCHEDULE_COLUMNS}) VALUES ({values(14)})",
        f"INSERT INTO schedule_fires ({FIRE_COLUMNS}, lease_owner, lease_until_ms) VALUES ({values(9)})"
        " ON CONFLICT (schedule_id, slot_ms) DO NOTHING",
    )


def schedule_values(s: ScheduleRow) -> tuple[Any, ...]:
    """The values of `SCHEDULE_COLUMNS` for `s` (its fields are named as the columns)."""
    values: tuple[Any, ...] = _SCHEDULE_VALUES(s)
    return values


def fire_values(f: FireRow) -> tuple[Any, ...]:
    return (f.schedule_id, f.slot_ms, f.tenant_id, f.run_id, f.status, f.updated_ms, f.reason)


def schedule_row(row: Sequence[Any]) -> ScheduleRow:
    (sid, tenant, agent, text, cron, zone, every_s, max_in_flight, overlap, misfire, paused, created, cursor, owner) = (
        row
    )
    return ScheduleRow(
        sid,
        tenant,
        agent,
        text,
        cron,
        zone,
        every_s,
        max_in_flight,
        overlap,
        misfire,
        bool(paused),
        created,
        cursor,
        owner,
    )


def fire_row(row: Sequence[Any]) -> FireRow:
    schedule_id, slot_ms, tenant_id, run_id, status, updated_ms, reason = row
    return FireRow(schedule_id, slot_ms, tenant_id, run_id, status, updated_ms, reason)
