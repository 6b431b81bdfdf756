"""Pure statistics for bench reports: nearest-rank percentiles and least-squares slopes."""

from __future__ import annotations

import math
from collections.abc import Sequence

PERCENTILES = (50, 95, 99)


def nearest_rank(sorted_values: Sequence[float], percentile: float) -> float:
    """The nearest-rank percentile of already sorted values: an observed value, never interpolated.

    Raises:
        ValueError: `sorted_values` is empty or `percentile` is outside (0, 100].
    """
    if not sorted_values:
        raise ValueError("no values")
    if not 0 < percentile <= 100:
        raise ValueError(f"percentile {percentile!r} is outside (0, 100]")
    rank = math.ceil(percentile / 100 * len(sorted_values))
    return sorted_values[rank - 1]


def percentiles_ms(values_s: Sequence[float]) -> dict[str, float | None]:
    """p50/p95/p99 in milliseconds (None each when there are no values)."""
    ordered = sorted(values_s)
    return {f"p{p}": (round(nearest_rank(ordered, p) * 1000, 1) if ordered else None) for p in PERCENTILES}


def slope(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """The least-squares slope of ys over xs (None with fewer than two distinct xs)."""
    n = len(xs)
    if n != len(ys) or n < 2:
        return None
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    var = sum((x - mean_x) ** 2 for x in xs)
    if var == 0:
        return None
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / var


def ratio(new: float | None, old: float | None) -> float | None:
    if new is None or old is None or old == 0:
        return None
    return new / old
