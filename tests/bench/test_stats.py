"""Nearest-rank percentiles (observed values, never interpolated) and the staircase slope."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentos_bench.report.stats import min_samples, nearest_rank, percentiles_ms, ratio, slope


def test_nearest_rank_textbook_examples() -> None:
    values = [15.0, 20.0, 35.0, 40.0, 50.0]
    assert nearest_rank(values, 5) == 15.0
    assert nearest_rank(values, 30) == 20.0
    assert nearest_rank(values, 40) == 20.0
    assert nearest_rank(values, 50) == 35.0
    assert nearest_rank(values, 100) == 50.0


def test_p99_of_a_hundred_values_is_the_99th() -> None:
    values = [float(i) for i in range(1, 101)]
    assert nearest_rank(values, 99) == 99.0
    assert nearest_rank(values, 95) == 95.0


def test_empty_or_bad_percentile_raises() -> None:
    with pytest.raises(ValueError):
        nearest_rank([], 50)
    with pytest.raises(ValueError):
        nearest_rank([1.0], 0)


@given(
    st.lists(st.floats(min_value=0, max_value=1e6), min_size=1, max_size=200), st.floats(min_value=0.1, max_value=100)
)
def test_nearest_rank_is_an_observed_value_and_monotone(values: list[float], p: float) -> None:
    ordered = sorted(values)
    result = nearest_rank(ordered, p)
    assert result in values
    assert result <= nearest_rank(ordered, min(100.0, p + 5))


def test_percentiles_in_milliseconds_with_their_sample_count() -> None:
    values = [i / 1000 for i in range(1, 101)]  # 1..100 ms
    assert percentiles_ms(values) == {"n": 100, "p50": 50.0, "p95": 95.0, "p99": 99.0}
    assert percentiles_ms([]) == {"n": 0, "p50": None, "p95": None, "p99": None}


def test_a_tail_percentile_needs_enough_samples() -> None:
    """Three turns give a median, not a p95 or a p99 (which would just be the slowest turn)."""
    assert percentiles_ms([0.1, 0.2, 0.3]) == {"n": 3, "p50": 200.0, "p95": None, "p99": None}
    assert percentiles_ms([0.1]) == {"n": 1, "p50": 100.0, "p95": None, "p99": None}
    twenty = percentiles_ms([i / 1000 for i in range(1, 21)])
    assert twenty["p95"] == 19.0 and twenty["p99"] is None
    assert percentiles_ms([i / 1000 for i in range(1, 20)])["p95"] is None
    assert percentiles_ms([i / 1000 for i in range(1, 100)])["p99"] is None


def test_min_samples_rule() -> None:
    assert [min_samples(p) for p in (1, 50, 90, 95, 99, 99.9)] == [1, 1, 10, 20, 100, 1000]
    with pytest.raises(ValueError):
        min_samples(100)


@given(st.lists(st.floats(min_value=0, max_value=1e3), max_size=150))
def test_a_percentile_is_shown_exactly_when_it_has_enough_samples(values: list[float]) -> None:
    found = percentiles_ms(values)
    assert found["n"] == len(values)
    for p in (50, 95, 99):
        assert (found[f"p{p}"] is not None) == (len(values) >= min_samples(p))


def test_slope_and_ratio() -> None:
    assert slope([1, 2, 3, 4], [10, 12, 14, 16]) == pytest.approx(2.0)
    assert slope([1], [1]) is None
    assert slope([2, 2], [1, 3]) is None
    assert ratio(3.0, 2.0) == 1.5
    assert ratio(1.0, 0.0) is None
    assert ratio(None, 1.0) is None
