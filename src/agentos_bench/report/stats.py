"""Pure statistics for bench reports: nearest-rank percentiles and least-squares slopes.

A percentile is reported only when enough samples stand behind it: p50 needs one sample, and a
tail percentile p needs at least 100 / (100 - p) of them (p95: 20, p99: 100), so that at least one
sample lies above it. With fewer, a "p99" would only be the maximum under another name, so it is
`None` (drawn as "–") and the sample count `n` says why.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

PERCENTILES = (50, 95, 99)


def cell(value: Any, spec: str = "g") -> str:
    """A value as a report's table shows it: "–" when it is missing, a float formatted by `spec`,
    anything else as `str`."""
    if value is None:
        return "–"
    return format(value, spec) if isinstance(value, float) else str(value)


def table(head: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    """A Markdown table's lines: `head`, the rule under it, then a line a row, each value as `cell` shows it."""
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return lines + ["| " + " | ".join(cell(value) for value in row) + " |" for row in rows]


def min_samples(percentile: float) -> int:
    """The fewest samples for which `percentile` is reported: 1 for p50 and below, 100 / (100 - p) above.

    Raises:
        ValueError: `percentile` is outside (0, 100).
    """
    if not 0 < percentile < 100:
        raise ValueError(f"percentile {percentile!r} is outside (0, 100)")
    if percentile <= 50:
        return 1
    return math.ceil(round(100 / (100 - percentile), 9))  # round: 100 / (100 - 99) is 100.00000000000001


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
    """`n` (the sample count) and p50/p95/p99 in milliseconds; a percentile with too few samples is None.

    See `min_samples` for how many samples each percentile needs.
    """
    ordered = sorted(values_s)
    found: dict[str, float | None] = {"n": len(ordered)}
    for p in PERCENTILES:
        enough = len(ordered) >= min_samples(p)
        found[f"p{p}"] = round(nearest_rank(ordered, p) * 1000, 1) if enough else None
    return found


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
