"""Slots of a schedule and what a round fires (agentos.schedules.slots): pure, no clock."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from agentos.errors import InvalidInput
from agentos.schedules import slots
from agentos.schedules.slots import (
    MAX_SLOTS_PER_PLAN,
    Cron,
    Every,
    check_cron,
    latest_before,
    load_zone,
    next_after,
    plan,
)

S = 1000
PARIS = ZoneInfo("Europe/Paris")


def ms(year: int, month: int, day: int, hour: int = 0, minute: int = 0, *, tz: ZoneInfo = PARIS) -> int:
    return int(datetime(year, month, day, hour, minute, tzinfo=tz).timestamp() * 1000)


def test_every_slots_come_from_the_anchor_not_from_the_last_fire() -> None:
    every = Every(10, anchor_ms=1_000)
    assert next_after(every, 0) == 11_000  # the anchor itself is not a slot: the first is a period later
    assert next_after(every, 11_000) == 21_000  # strictly after
    assert next_after(every, 11_001) == 21_000
    assert next_after(every, 29_999) == 31_000
    assert latest_before(every, 21_000) == 11_000
    assert latest_before(every, 11_000) is None


def test_cron_slots_follow_the_zone_through_daylight_saving() -> None:
    nine = Cron("0 9 * * *", "Europe/Paris")
    before = ms(2026, 3, 28, 12, 0)  # Saturday; Paris moves to summer time on Sunday the 29th
    assert next_after(nine, before) == ms(2026, 3, 29, 9, 0)
    assert next_after(nine, ms(2026, 3, 29, 9, 0)) == ms(2026, 3, 30, 9, 0)
    assert ms(2026, 3, 30, 9, 0) - ms(2026, 3, 29, 9, 0) == 24 * 3600 * S  # 09:00 local each day
    assert ms(2026, 3, 29, 9, 0) - ms(2026, 3, 28, 9, 0) == 23 * 3600 * S  # the short day
    assert latest_before(nine, ms(2026, 3, 29, 9, 0)) == ms(2026, 3, 28, 9, 0)


@pytest.mark.parametrize(
    ("expr", "zone", "code"),
    [
        ("not a cron", "UTC", "invalid_cron"),
        ("* * * *", "UTC", "invalid_cron"),
        ("* * * * * *", "UTC", "invalid_cron"),  # seconds: `every_s` says that
        ("61 * * * *", "UTC", "invalid_cron"),
        ("* * * * *", "Mars/Olympus", "unknown_time_zone"),
        ("* * * * *", "../etc/passwd", "unknown_time_zone"),
        ("* * * * *", "", "unknown_time_zone"),
    ],
)
def test_bad_cron_or_zone_is_refused(expr: str, zone: str, code: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        check_cron(expr, zone)
    assert caught.value.code == code


@pytest.mark.parametrize("zone", ["Mars/Olympus", "../etc/passwd", "", "x" * 5000])
async def test_a_zone_that_is_not_one_is_refused_and_never_kept(zone: str) -> None:
    """Zones are kept once read (off the loop); only real ones: a caller cannot grow the cache."""
    with pytest.raises(InvalidInput) as caught:
        await load_zone(zone)
    assert caught.value.code == "unknown_time_zone" and zone not in slots._LOADED
    await load_zone("Asia/Kolkata")
    assert slots._LOADED["Asia/Kolkata"] is ZoneInfo("Asia/Kolkata")  # the instance ZoneInfo hands out


def test_a_valid_cron_is_normalised() -> None:
    assert check_cron("  */5  *  * * 1-5 ", "America/New_York") == Cron("*/5 * * * 1-5", "America/New_York")


def test_on_time_slots_fire_each_in_order() -> None:
    every = Every(1, anchor_ms=0)
    decided = plan(every, 1 * S, 3 * S + 500, grace_ms=30 * S, misfire="skip")
    assert decided.fire == (1 * S, 2 * S, 3 * S)
    assert decided.missed == 0
    assert decided.cursor_ms == 4 * S  # the next slot, computed from the schedule
    assert plan(every, 4 * S, 3 * S + 900, grace_ms=30 * S, misfire="skip").fire == ()


def test_after_downtime_skip_drops_the_missed_slots() -> None:
    every = Every(60, anchor_ms=0)
    # down from slot 1 to past slot 100; the grace keeps the last 30 s
    decided = plan(every, 60 * S, 100 * 60 * S + 10 * S, grace_ms=30 * S, misfire="skip")
    assert decided.fire == (100 * 60 * S,)  # the slot within the grace still fires
    assert decided.missed == 99
    assert decided.cursor_ms == 101 * 60 * S


def test_after_downtime_run_once_fires_the_latest_missed_slot_once() -> None:
    every = Every(60, anchor_ms=0)
    decided = plan(every, 60 * S, 100 * 60 * S + 45 * S, grace_ms=30 * S, misfire="run_once")
    assert decided.fire == (100 * 60 * S,)  # 45 s late: missed, and the one fire for all of them
    assert decided.missed == 99
    decided = plan(every, 60 * S, 100 * 60 * S + 45 * S, grace_ms=30 * S, misfire="skip")
    assert decided.fire == () and decided.missed == 100


def test_a_year_of_downtime_is_computed_not_walked() -> None:
    every = Every(1, anchor_ms=0)
    year = 365 * 24 * 3600 * S
    decided = plan(every, S, year, grace_ms=0, misfire="run_once")
    assert decided.fire == (year - S, year)
    assert decided.cursor_ms == year + S


def test_a_plan_fires_at_most_a_bounded_number_of_slots() -> None:
    every = Every(1, anchor_ms=0)
    decided = plan(every, S, 1000 * S, grace_ms=2000 * S, misfire="skip")
    assert len(decided.fire) == MAX_SLOTS_PER_PLAN
    assert decided.cursor_ms == (MAX_SLOTS_PER_PLAN + 1) * S  # the rest wait for the next round


def test_cron_after_downtime() -> None:
    hourly = Cron("0 * * * *", "UTC")
    start = ms(2026, 1, 1, 0, 0, tz=ZoneInfo("UTC"))
    decided = plan(hourly, start, start + 5 * 3600 * S + 10 * S, grace_ms=30 * S, misfire="run_once")
    # 10 s late for 05:00: on time; 00:00 to 04:00 were missed, 04:00 fires once for them all
    assert decided.fire == (start + 4 * 3600 * S, start + 5 * 3600 * S)
    assert decided.missed == 4
    assert decided.cursor_ms == start + 6 * 3600 * S
