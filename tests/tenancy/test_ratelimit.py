"""GCRA: burst, steady rate, exact retry_after, uncommitted decisions, bounded memory.
Time is a FakeClock's number passed in: no sleeps."""

from __future__ import annotations

import pytest

from agentos.tenancy.ratelimit import WINDOW_S, Gcra
from agentos.testing import FakeClock


def test_a_burst_of_the_limit_then_one_every_interval() -> None:
    gcra, clock = Gcra(), FakeClock(1000.0)
    remaining = [gcra.decide("k", 10, clock.now()) for _ in range(10)]
    assert [d.allowed for d in remaining] == [True] * 10
    assert [d.remaining for d in remaining] == list(range(9, -1, -1))
    refused = gcra.decide("k", 10, clock.now())
    assert not refused.allowed and refused.remaining == 0
    assert refused.retry_after == pytest.approx(6.0)  # 60 s / 10
    for _ in range(5):  # the steady rate: one every 6 s, not one more
        clock.advance(6.0)
        assert gcra.decide("k", 10, clock.now()).allowed
        assert not gcra.decide("k", 10, clock.now()).allowed


def test_retry_after_is_exact() -> None:
    gcra, clock = Gcra(), FakeClock(5.0)
    for _ in range(3):
        gcra.decide("k", 3, clock.now())
    clock.advance(7.25)  # part of the way to the next unit (one every 20 s)
    refused = gcra.decide("k", 3, clock.now())
    assert refused.retry_after == pytest.approx(20.0 - 7.25)
    assert not gcra.decide("k", 3, clock.now() + refused.retry_after - 1e-6).allowed
    assert gcra.decide("k", 3, clock.now() + refused.retry_after).allowed


def test_reset_is_the_time_until_one_more_unit() -> None:
    gcra = Gcra()
    first = gcra.decide("k", 60, 0.0)  # one a second
    assert first.remaining == 59 and first.reset == pytest.approx(1.0)
    later = gcra.decide("k", 60, 0.25)  # the first unit is three quarters back
    assert later.remaining == 58 and later.reset == pytest.approx(0.75)


def test_keys_are_independent_and_a_refusal_takes_nothing() -> None:
    gcra = Gcra()
    assert gcra.decide("a", 1, 0.0).allowed
    for _ in range(5):
        assert not gcra.decide("a", 1, 0.0).allowed
    assert gcra.decide("a", 1, 60.0).allowed  # refusals did not push the time out
    assert gcra.decide("b", 1, 0.0).allowed


def test_an_uncommitted_decision_takes_nothing_until_committed() -> None:
    gcra = Gcra()
    probe = gcra.decide("k", 1, 0.0, commit=False)
    assert probe.allowed and len(gcra) == 0
    assert gcra.decide("k", 1, 0.0, commit=False).allowed  # still nothing taken
    gcra.commit("k", probe, 0.0)
    assert not gcra.decide("k", 1, 0.0).allowed


def test_memory_stays_bounded_over_a_stream_of_distinct_keys() -> None:
    """200,000 keys, 100 new ones a second, each used once: the table holds about the keys of
    the last window or two, never all of them, and nothing once they are all idle again."""
    gcra, clock = Gcra(), FakeClock()
    largest = 0
    for i in range(200_000):
        gcra.decide(f"key-{i}", 1, clock.now())  # one a minute: each entry lives 60 s
        largest = max(largest, len(gcra))
        clock.advance(0.01)
    per_window = int(WINDOW_S / 0.01)
    assert largest <= 2 * per_window + 1024
    clock.advance(WINDOW_S + 1)
    gcra.decide("last", 1, clock.now())
    assert len(gcra) == 1


def test_a_refund_gives_back_exactly_one_unit() -> None:
    gcra = Gcra()
    for _ in range(3):
        assert gcra.decide("k", 3, 0.0).allowed
    assert not gcra.decide("k", 3, 0.0).allowed
    gcra.refund("k", 3)
    assert gcra.decide("k", 3, 0.0).allowed
    assert not gcra.decide("k", 3, 0.0).allowed
    gcra.refund("nobody", 3)  # a full bucket stays full
    assert len(gcra) == 1
