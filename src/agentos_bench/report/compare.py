"""`agentos bench compare A.json B.json`: ratios B/A, and a regression flag when p95 or RSS grew.

A regression is a p95 (TTFT or turn) or an RSS figure of B above A by more than the threshold
(20% by default), on a row both reports measured. Throughput is printed, not judged: in a closed
loop it follows latency.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from agentos_bench.report.stats import ratio

DEFAULT_THRESHOLD = 0.20

# (label, path into a sweep row, judged?)
_SWEEP_METRICS: tuple[tuple[str, tuple[str, ...], bool], ...] = (
    ("turns/s", ("turns_per_s",), False),
    ("ttft p95", ("ttft_ms", "p95"), True),
    ("turn p95", ("turn_ms", "p95"), True),
    ("rss peak", ("server_rss_mb_peak",), True),
    ("private dirty peak", ("server_private_dirty_mb_peak",), True),
)
_MEMORY_METRICS: tuple[tuple[str, tuple[str, ...], bool], ...] = (
    ("base rss", ("base_mb", "rss"), True),
    ("end rss", ("end_mb", "rss"), True),
    ("marginal rss/session", ("marginal_kb_per_session", "rss"), True),
    ("base private dirty", ("base_mb", "private_dirty"), True),
    ("marginal private dirty/session", ("marginal_kb_per_session", "private_dirty"), True),
)


@dataclass(frozen=True, slots=True)
class Comparison:
    row: str
    metric: str
    old: float | None
    new: float | None
    ratio: float | None
    regression: bool


def _dig(data: dict[str, Any], path: tuple[str, ...]) -> float | None:
    value: Any = data
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return float(value) if isinstance(value, int | float) else None


def _row_key(row: dict[str, Any]) -> str:
    return f"{row['target']}:{row.get('profile') or '-'}:c={row['concurrency']}"


def _pairs(old: dict[str, Any], new: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    if old["kind"] == "memory":
        yield f"memory:{new.get('profile')}", old["summary"], new["summary"]
        return
    old_rows = {_row_key(r): r for r in old["rows"]}
    for row in new["rows"]:
        key = _row_key(row)
        if key in old_rows:
            yield key, old_rows[key], row


def compare_reports(old: dict[str, Any], new: dict[str, Any], threshold: float = DEFAULT_THRESHOLD) -> list[Comparison]:
    """Every metric on every row both reports hold.

    Raises:
        ValueError: the reports are of different kinds.
    """
    if old["kind"] != new["kind"]:
        raise ValueError(f"cannot compare a {old['kind']!r} report with a {new['kind']!r} report")
    metrics = _MEMORY_METRICS if old["kind"] == "memory" else _SWEEP_METRICS
    out = []
    for key, old_row, new_row in _pairs(old, new):
        for label, path, judged in metrics:
            a, b = _dig(old_row, path), _dig(new_row, path)
            r = ratio(b, a)
            out.append(Comparison(key, label, a, b, r, judged and r is not None and r > 1 + threshold))
    return out


def format_comparisons(comparisons: list[Comparison]) -> str:
    lines = [f"{'row':<32} {'metric':<32} {'A':>10} {'B':>10} {'B/A':>7}"]
    for c in comparisons:
        ratio_text = "–" if c.ratio is None else f"{c.ratio:.2f}"
        flag = "  REGRESSION" if c.regression else ""
        lines.append(f"{c.row:<32} {c.metric:<32} {_num(c.old):>10} {_num(c.new):>10} {ratio_text:>7}{flag}")
    regressions = sum(c.regression for c in comparisons)
    lines.append(f"{regressions} regression(s) in {len(comparisons)} comparison(s)")
    return "\n".join(lines)


def _num(value: float | None) -> str:
    return "–" if value is None else f"{value:g}"
