"""The knowledge report's picture: query p50 and p95 per collection and filter, against the target."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt

from agentos_bench.knowledge.plan import TARGET_P95_MS


def plot_latency(report: dict[str, Any], path: Path) -> Path:
    rows = report["queries"]
    labels = [f"{r['chunks']} chunks\n{'filter' if r['filter'] else 'no filter'}" for r in rows]
    positions = range(len(rows))
    fig, ax = plt.subplots(figsize=(7, 4))
    for offset, key in ((-0.2, "p50"), (0.2, "p95")):
        values = [r["latency_ms"][key] or 0.0 for r in rows]
        ax.bar([p + offset for p in positions], values, width=0.4, label=key)
    ax.axhline(TARGET_P95_MS, color="red", linestyle="--", linewidth=1, label=f"target p95 {TARGET_P95_MS:g} ms")
    ax.set_xticks(list(positions), labels)
    ax.set_ylabel("query latency, ms (client)")
    ax.set_title(f"Knowledge query latency ({report['plan']['backend']}, {report['plan']['dimensions']} dims)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
