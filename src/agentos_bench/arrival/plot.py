"""The load report's picture: each request's latency (from its due time) over the run, by load,
with the phases marked and failures drawn at the bottom."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt


def plot_timeline(report: dict[str, Any], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(10, 5))
    kinds = list(report["what_ran"]["by_load"])
    floor = 1.0  # ms: where failures are drawn (log axis)
    for kind in kinds:
        points = [(t, ms) for t, k, ms, _ in report["timeline"] if k == kind and ms is not None]
        if points:
            ax.scatter([p[0] for p in points], [max(p[1], floor) for p in points], s=4, label=kind)
    failed = [t for t, _, ms, _ in report["timeline"] if ms is None]
    if failed:
        ax.scatter(failed, [floor] * len(failed), s=10, marker="x", color="red", label=f"failed ({len(failed)})")
    for name, phase in report["phases"].items():
        ax.axvline(phase["start_s"], color="grey", linewidth=0.8, linestyle=":")
        ax.text(phase["start_s"], 1.02, f" {name} {phase['rate']:g}/s", transform=ax.get_xaxis_transform(), fontsize=8)
    ax.set_yscale("log")
    ax.set_xlabel("due time, s from the start")
    ax.set_ylabel("latency from due time, ms (log)")
    ax.legend(fontsize=8, markerscale=3, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
