"""PNG plots of sweep and memory reports (matplotlib, Agg backend, no display needed)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt

_PERCENTILE_STYLES = {"p50": "-", "p95": "--", "p99": ":"}


def _series(rows: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Rows grouped by line label: `direct`, or `server:<profile>`."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        label = "direct (mock only)" if row["target"] == "direct" else f"server: {row.get('profile') or '?'}"
        groups.setdefault(label, []).append(row)
    return {label: sorted(group, key=lambda r: r["concurrency"]) for label, group in groups.items()}


def _log2_axis(ax: Any, rows: Sequence[dict[str, Any]]) -> None:
    points = sorted({r["concurrency"] for r in rows})
    ax.set_xscale("log", base=2)
    ax.set_xticks(points, [str(p) for p in points])
    ax.set_xlabel("concurrency (sessions = workers)")
    ax.grid(True, which="both", alpha=0.3)


def plot_latency(rows: Sequence[dict[str, Any]], metric: str, title: str, path: Path) -> Path:
    """`metric` is `ttft_ms` or `turn_ms`: p50/p95/p99 against concurrency, one colour per series."""
    fig, ax = plt.subplots(figsize=(8, 5))
    for index, (label, group) in enumerate(_series(rows).items()):
        colour = f"C{index}"
        for percentile, style in _PERCENTILE_STYLES.items():
            xs = [r["concurrency"] for r in group if r[metric][percentile] is not None]
            ys = [r[metric][percentile] for r in group if r[metric][percentile] is not None]
            ax.plot(xs, ys, style, color=colour, marker="o", markersize=3, label=f"{label} {percentile}")
    _log2_axis(ax, rows)
    ax.set_ylabel("milliseconds")
    ax.set_title(title)
    ax.legend(fontsize=7)
    return _save(fig, path)


def plot_throughput(rows: Sequence[dict[str, Any]], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(8, 5))
    for label, group in _series(rows).items():
        ax.plot([r["concurrency"] for r in group], [r["turns_per_s"] for r in group], marker="o", label=label)
    _log2_axis(ax, rows)
    ax.set_yscale("log")
    ax.set_ylabel("successful turns per second")
    ax.set_title("Throughput against concurrency (direct = the mock alone)")
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_staircase(report: dict[str, Any], path: Path) -> Path:
    steps = report["steps"]
    xs = [s["sessions"] for s in steps]
    fig, ax = plt.subplots(figsize=(8, 5))
    ax.plot(xs, [s["rss_mb"] for s in steps], label="RSS (server tree)")
    ax.plot(xs, [s["private_dirty_mb"] for s in steps], label="Private_Dirty (server tree)")
    for name, marker in (("after_delete", "v"), ("after_ttl", "s")):
        point = report.get("release", {}).get(name)
        if point:
            ax.plot([xs[-1]], [point["rss_mb"]], marker, color="C0", label=f"RSS {name.replace('_', ' ')}")
            ax.plot([xs[-1]], [point["private_dirty_mb"]], marker, color="C1")
    ax.set_xlabel("sessions (each with one completed turn)")
    ax.set_ylabel("MB")
    ax.set_title(f"Memory staircase: {report.get('profile')}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
