"""What the server adds to a turn: each server row of a sweep against the direct row at the same concurrency.

The direct row is the mock alone, measured in the same run, so `server − direct` removes the
mock's own time (about 2 s per turn in the reference sweep) and leaves the server's overhead.
Latency overhead is a difference of percentiles (server p95 − direct p95), not a percentile of
differences: the turns of the two targets are not paired. A difference is None when either side
has too few samples for that percentile (see `agentos_bench.report.stats.min_samples`).
Throughput is a ratio (server turns/s ÷ direct turns/s; 1.0 = no loss).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

LATENCY_METRICS = ("ttft_ms", "turn_ms")
PERCENTILE_KEYS = ("p50", "p95", "p99")


def overhead_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per server or peer row that has a direct row at its concurrency, in the rows' order.

    Each entry: `profile`, `concurrency`, `n_server` and `n_direct` (successful turns behind the
    turn percentiles), `ttft_ms` and `turn_ms` (p50/p95/p99 differences, ms) and `turns_per_s_ratio`.
    """
    direct = {r["concurrency"]: r for r in rows if r["target"] == "direct"}
    out = []
    for row in rows:
        base = direct.get(row["concurrency"])
        if row["target"] == "direct" or base is None:  # Agent OS's rows and the peers' (profile `peer:<name>`)
            continue
        entry: dict[str, Any] = {
            "profile": row.get("profile"),
            "concurrency": row["concurrency"],
            "n_server": row["turn_ms"].get("n", row.get("turns_ok")),
            "n_direct": base["turn_ms"].get("n", base.get("turns_ok")),
        }
        for metric in LATENCY_METRICS:
            entry[metric] = {p: _minus(row[metric].get(p), base[metric].get(p)) for p in PERCENTILE_KEYS}
        entry["turns_per_s_ratio"] = _ratio(row["turns_per_s"], base["turns_per_s"])
        out.append(entry)
    return out


def _minus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(a - b, 1)


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else round(a / b, 3)
