"""PNG plots of sweep and memory reports (matplotlib, Agg backend, no display needed)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt

_PERCENTILE_STYLES = {"p50": ("-", "o"), "p95": ("--", "s"), "p99": (":", "^")}  # line, marker
_SAMPLE_NOTE = "points with too few turns are left out: p95 needs >= 20 on both sides, p99 >= 100"


def _series(rows: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Rows grouped by line label: `direct`, or `server:<profile>`."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        label = "direct (mock only)" if row.get("target") == "direct" else f"server: {row.get('profile') or '?'}"
        groups.setdefault(label, []).append(row)
    return {label: sorted(group, key=lambda r: r["concurrency"]) for label, group in groups.items()}


def _log2_axis(ax: Any, rows: Sequence[dict[str, Any]]) -> None:
    points = sorted({r["concurrency"] for r in rows})
    ax.set_xscale("log", base=2)
    ax.set_xticks(points, [str(p) for p in points])
    ax.set_xlabel("concurrency (sessions = workers)")
    ax.grid(True, which="both", alpha=0.3)


def _percentile_lines(ax: Any, rows: Sequence[dict[str, Any]], metric: str) -> list[float]:
    """p50/p95/p99 of `metric` per series (None points skipped); returns every value drawn."""
    drawn: list[float] = []
    for index, (label, group) in enumerate(_series(rows).items()):
        for percentile, (style, marker) in _PERCENTILE_STYLES.items():
            points = [(r["concurrency"], r[metric][percentile]) for r in group if r[metric].get(percentile) is not None]
            if points:
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, style, color=f"C{index}", marker=marker, markersize=4, label=f"{label} {percentile}")
                drawn += ys
    return drawn


def plot_overhead(overhead: Sequence[dict[str, Any]], metric: str, title: str, path: Path) -> Path:
    """Server minus direct, ms, for `metric` (`ttft_ms` or `turn_ms`) against concurrency, with a zero line.

    The y axis always includes zero, so a 2 ms overhead looks small and a 200 ms one does not.
    """
    fig, ax = plt.subplots(figsize=(8, 5))
    ax.axhline(0.0, color="black", linewidth=1)
    drawn = _percentile_lines(ax, overhead, metric)
    ax.set_ylim(*zero_based_limits(drawn))
    _log2_axis(ax, overhead)
    ax.set_ylabel("server − direct, ms (same concurrency)")
    ax.set_title(title)
    _note(fig, _SAMPLE_NOTE)
    ax.legend(fontsize=7, handlelength=4)
    return _save(fig, path)


def zero_based_limits(values: Sequence[float]) -> tuple[float, float]:
    """Y limits that hold every value and zero, with a margin of 10% of the span (at least 1 ms).

    Zero is always on the axis, so the eye reads an overhead against "no overhead", not against
    a window zoomed onto the data.
    """
    low, high = min([0.0, *values]), max([0.0, *values])
    pad = max((high - low) * 0.1, 1.0)
    return (low - pad if low < 0 else -pad / 4), high + pad


def plot_throughput_ratio(overhead: Sequence[dict[str, Any]], path: Path) -> Path:
    """Server turns/s ÷ direct turns/s against concurrency: 1.0 is no loss."""
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.axhline(1.0, color="black", linewidth=1, label="= direct (no loss)")
    ax.axhline(0.95, linestyle="--", color="grey", linewidth=1, label="95% of direct")
    ratios: list[float] = []
    for index, (label, group) in enumerate(_series(overhead).items()):
        points = [(r["concurrency"], r["turns_per_s_ratio"]) for r in group if r["turns_per_s_ratio"] is not None]
        if points:
            xs, ys = zip(*points, strict=True)
            ax.plot(xs, ys, marker="o", color=f"C{index}", label=label)
            ratios += ys
    ax.set_ylim(min([0.9, *ratios]) - 0.05, max([1.05, *ratios]) + 0.05)
    _log2_axis(ax, overhead)
    ax.set_ylabel("server turns/s ÷ direct turns/s")
    ax.set_title("Throughput against the mock alone (same concurrency)")
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_latency(rows: Sequence[dict[str, Any]], metric: str, title: str, path: Path) -> Path:
    """Absolute p50/p95/p99 of `metric` against concurrency: for sweeps without a direct row to subtract."""
    fig, ax = plt.subplots(figsize=(8, 5))
    _percentile_lines(ax, rows, metric)
    _log2_axis(ax, rows)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("milliseconds")
    ax.set_title(title)
    _note(fig, "points with too few turns are left out: p95 needs >= 20, p99 >= 100")
    ax.legend(fontsize=7, handlelength=4)
    return _save(fig, path)


def plot_throughput(rows: Sequence[dict[str, Any]], path: Path) -> Path:
    """Absolute turns/s against concurrency: for sweeps without a direct row to divide by."""
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for index, (label, group) in enumerate(_series(rows).items()):
        xs, ys = [r["concurrency"] for r in group], [r["turns_per_s"] for r in group]
        ax.plot(xs, ys, marker="o", color=f"C{index}", label=label)
    ax.set_yscale("log")
    _log2_axis(ax, rows)
    ax.set_ylabel("successful turns per second")
    ax.set_title("Throughput against concurrency")
    ax.legend(fontsize=8)
    return _save(fig, path)


def _note(fig: Any, text: str) -> None:
    fig.text(0.01, 0.005, text, fontsize=7, color="dimgrey", ha="left", va="bottom")


def plot_staircase(report: dict[str, Any], path: Path) -> Path:
    """RSS and Private_Dirty against sessions, one panel each (their own scale), release marks at the right."""
    steps = report["steps"]
    xs = [s["items"] if "items" in s else s["sessions"] for s in steps]
    fig, axes = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
    for ax, (field_name, label, colour) in zip(axes, _MEMORY_SERIES, strict=True):
        ax.plot(xs, [s[field_name] for s in steps], color=colour, label=f"{label} (server tree)")
        if field_name == "private_dirty_mb" and all("heap_mb" in s for s in steps):
            ax.plot(xs, [s["heap_mb"] for s in steps], color="C2", label="Python heap (tracemalloc)")
        for name, marker in (("after_delete", "v"), ("after_ttl", "s"), ("after_end", "o")):
            point = report.get("release", {}).get(name)
            if point:
                ax.plot([xs[-1]], [point[field_name]], marker, color="black", label=name.replace("_", " "))
        ax.set_ylabel(f"{label}, MB")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].set_title(f"Memory staircase: {report.get('profile')}")
    axes[-1].set_xlabel(f"items: {report.get('item', 'session with one completed turn')}")
    return _save(fig, path)


_MEMORY_SERIES = (("rss_mb", "RSS", "C0"), ("private_dirty_mb", "Private_Dirty", "C1"))


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout(rect=(0, 0.03, 1, 1))  # room for the note under the axes
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
