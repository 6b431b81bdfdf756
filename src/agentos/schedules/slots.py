"""When a schedule fires: its slots, and which of them a round of the scheduler fires. Pure: time
is an argument (epoch milliseconds), nothing here reads a clock or a database.

Theory of operation. A schedule's slots are a function of the schedule alone: a cron expression
in an IANA time zone (croniter walks it, daylight saving included), or `every` N seconds from
the schedule's anchor (its creation time). The scheduler keeps a cursor per schedule, the first
slot it has not decided yet; `plan(timing, cursor_ms, now_ms, ...)` decides every slot from the
cursor up to `now_ms` and returns the new cursor. The next slot is always computed from the
schedule, never from when the last fire happened, so a slow round or a late node shifts nothing.

A slot decided within `grace_ms` of its time fires. Slots older than that were missed (the
server was down, or the loop was held up): `misfire = "skip"` drops them; `"run_once"` fires
the latest missed slot once, for all of them. Either way the cursor moves past them in one step
(computed, not walked: a year of downtime on an `every = 1` schedule costs nothing).
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from agentos.errors import InvalidInput

Misfire = Literal["skip", "run_once"]
_COUNT_BOUND = 100
MAX_SLOTS_PER_PLAN = 100  # slots fired by one plan; the rest wait for the next round (the cursor says where)


@dataclass(frozen=True, slots=True)
class Cron:
    expr: str  # five fields: minute hour day-of-month month day-of-week
    zone: str  # an IANA time zone ("Europe/Paris", "UTC")


@dataclass(frozen=True, slots=True)
class Every:
    every_s: int
    anchor_ms: int  # the slots are anchor_ms + k * every_s (k >= 1)


Timing = Cron | Every


@dataclass(frozen=True, slots=True)
class Plan:
    fire: tuple[int, ...]  # the slots to fire, oldest first
    missed: int  # slots dropped as missed (past the grace); a missed slot fired for run_once not counted
    cursor_ms: int  # the first slot not decided yet


def check_cron(expr: str, zone: str) -> Cron:
    """The timing of a valid cron expression in a known zone.

    Raises:
        InvalidInput: not five fields croniter accepts (`invalid_cron`), or an unknown zone (`unknown_time_zone`).
    """
    fields = expr.split()
    if len(fields) != 5 or not croniter.is_valid(" ".join(fields)):
        raise InvalidInput(f"cron {expr!r} is not five valid cron fields", code="invalid_cron")
    check_zone(zone)
    timing = Cron(" ".join(fields), zone)
    try:
        next_after(timing, 0)  # "0 0 31 2 *" parses but never happens: croniter gives up on it
    except Exception:
        raise InvalidInput(f"cron {expr!r} never fires", code="invalid_cron") from None
    return timing


MAX_ZONE_CHARS = 64  # the API's bound on `time_zone` too; the longest IANA name has 30


def check_zone(zone: str) -> ZoneInfo:
    """The zone: a file of the IANA database read, unless `load_zone` read it before.

    Raises: InvalidInput (`unknown_time_zone`): not a zone of the IANA database."""
    if len(zone) > MAX_ZONE_CHARS:  # no zone is; a name past the file system's limit is an OSError
        raise InvalidInput(f"time zone {zone[:MAX_ZONE_CHARS]!r}... is not an IANA time zone", code="unknown_time_zone")
    try:
        return ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):  # ValueError: not a key at all ("../etc", "")
        raise InvalidInput(f"time zone {zone!r} is not an IANA time zone", code="unknown_time_zone") from None


# Every zone read so far, kept for the process's life (the database has about 600): ZoneInfo's
# own cache holds only its last eight for sure, and a zone it let go is read again from disk.
_LOADED: dict[str, ZoneInfo] = {}


async def load_zone(zone: str) -> None:
    """Read `zone` in a thread, once per process: afterwards every `ZoneInfo(zone)` (a slot
    computed, a cron checked) is a cache hit, never a file read on the event loop.

    Raises: InvalidInput (`unknown_time_zone`)."""
    if zone not in _LOADED:
        _LOADED[zone] = await asyncio.to_thread(check_zone, zone)


def next_after(timing: Timing, t_ms: int) -> int:
    """The first slot strictly after `t_ms`."""
    if isinstance(timing, Every):
        period = timing.every_s * 1000
        k = max((t_ms - timing.anchor_ms) // period + 1, 1)
        return timing.anchor_ms + k * period
    start = datetime.fromtimestamp(math.floor(t_ms / 1000), tz=ZoneInfo(timing.zone))
    return _ms(croniter(timing.expr, start).get_next(datetime))


def latest_before(timing: Timing, t_ms: int) -> int | None:
    """The last slot strictly before `t_ms` (None: there is none)."""
    if isinstance(timing, Every):
        period = timing.every_s * 1000
        k = (t_ms - timing.anchor_ms - 1) // period
        return timing.anchor_ms + k * period if k >= 1 else None
    start = datetime.fromtimestamp(math.ceil(t_ms / 1000), tz=ZoneInfo(timing.zone))
    return _ms(croniter(timing.expr, start).get_prev(datetime))


def first_slot(timing: Timing, now_ms: int) -> int:
    """Where a new (or resumed) schedule's cursor starts: its first slot after `now_ms`."""
    return next_after(timing, now_ms)


def plan(timing: Timing, cursor_ms: int, now_ms: int, *, grace_ms: int, misfire: Misfire) -> Plan:
    """Decide the slots from `cursor_ms` (a slot) up to `now_ms`: see the module's docstring."""
    fire: list[int] = []
    missed = 0
    slot = cursor_ms
    window_ms = now_ms - grace_ms  # slots before it were missed
    if slot < window_ms:
        last_missed = latest_before(timing, window_ms)
        if last_missed is not None and last_missed >= slot:
            missed = _count(timing, slot, last_missed)
            if misfire == "run_once":
                fire.append(last_missed)
                missed -= 1
            slot = next_after(timing, last_missed)
    while slot <= now_ms and len(fire) < MAX_SLOTS_PER_PLAN:
        fire.append(slot)
        slot = next_after(timing, slot)
    return Plan(tuple(fire), missed, slot)


def _count(timing: Timing, first_ms: int, last_ms: int) -> int:
    """How many slots from `first_ms` to `last_ms` (both slots); for cron, at most `_COUNT_BOUND`
    (a number for the metric: walking a month of minutes on the loop is not worth it)."""
    if isinstance(timing, Every):
        return (last_ms - first_ms) // (timing.every_s * 1000) + 1
    count, slot = 1, first_ms
    while slot < last_ms and count < _COUNT_BOUND:
        slot = next_after(timing, slot)
        count += 1
    return count


def _ms(when: datetime) -> int:
    return int(when.astimezone(UTC).timestamp() * 1000)
