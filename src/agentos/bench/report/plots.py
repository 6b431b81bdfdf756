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
    """Turns/s against concurrency (top), and each server series ÷ the direct row (bottom)."""
    series = _series(rows)
    direct = {r["concurrency"]: r["turns_per_s"] for r in rows if r["target"] == "direct"}
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 7), sharex=True, height_ratios=(2, 1))
    for index, (label, group) in enumerate(series.items()):
        xs = [r["concurrency"] for r in group]
        top.plot(xs, [r["turns_per_s"] for r in group], marker="o", color=f"C{index}", label=label)
        ratios = [
            (r["concurrency"], r["turns_per_s"] / direct[r["concurrency"]])
            for r in group
            if direct.get(r["concurrency"])
        ]
        if ratios and group[0]["target"] != "direct":
            bottom.plot(*zip(*ratios, strict=True), marker="o", color=f"C{index}", label=label)
    top.set_yscale("log")
    top.set_ylabel("successful turns per second")
    top.set_title("Throughput against concurrency (direct = the mock alone)")
    top.legend(fontsize=8)
    top.grid(True, which="both", alpha=0.3)
    bottom.axhline(0.95, linestyle="--", color="grey", linewidth=1, label="95% of direct")
    bottom.set_ylabel("server ÷ direct")
    bottom.legend(fontsize=8)
    _log2_axis(bottom, rows)
    return _save(fig, path)


def plot_staircase(report: dict[str, Any], path: Path) -> Path:
    """RSS and Private_Dirty against sessions, one panel each (their own scale), release marks at the right."""
    steps = report["steps"]
    xs = [s["sessions"] for s in steps]
    fig, axes = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
    for ax, (field_name, label, colour) in zip(axes, _MEMORY_SERIES, strict=True):
        ax.plot(xs, [s[field_name] for s in steps], color=colour, label=f"{label} (server tree)")
        for name, marker in (("after_delete", "v"), ("after_ttl", "s")):
            point = report.get("release", {}).get(name)
            if point:
                ax.plot([xs[-1]], [point[field_name]], marker, color="black", label=name.replace("_", " "))
        ax.set_ylabel(f"{label}, MB")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].set_title(f"Memory staircase: {report.get('profile')}")
    axes[-1].set_xlabel("sessions (each with one completed turn)")
    return _save(fig, path)


_MEMORY_SERIES = (("rss_mb", "RSS", "C0"), ("private_dirty_mb", "Private_Dirty", "C1"))


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
