"""`agentos bench gate`: the regression alarm of the reference documents (agentos-performance:
p95 or RSS up by 20-25% is a regression), run on every CI submission.

Theory of operation. A short closed-loop sweep (`agentos bench sweep`, the `full-store` profile,
1, 64 and 256 concurrent turns, a few seconds each, against the mock) measures the server and
the mock directly in the same run. What is judged is relative to that direct run, so a slower
or busier machine moves both sides alike:

- throughput: the server's turns/s ÷ the direct mock's, at each point;
- latency: the server's turn p95 ÷ the direct mock's (p50 ÷ p50 where too few turns give no p95);
- memory: the server's peak RSS (absolute: the mock does not share it).

Each is compared with the committed baseline (`bench/baseline/gate.json`, written by
`agentos bench gate --update` with the machine it came from): a throughput ratio that fell,
or a latency ratio or RSS that rose, by more than `--threshold` (0.20) is a regression. Two
cores shared by server, mock and load generator are noisy, so a failed attempt is measured
again (`--attempts`, 3): the gate fails only when every attempt regressed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

POINTS = (1, 64, 256)
BASELINE = Path("bench/baseline/gate.json")
DURATION_S = 6.0  # per point (at c = 1, 11 turns: p50 against p50; at 256, about 2800 turns)


def sweep_args(duration_s: float) -> list[str]:
    """The sweep the gate runs (a turn of about 0.54 s: TTFT 500 ms, then 8 tokens at 200/s)."""
    points = ",".join(map(str, POINTS))
    mock = ["--mock-ttft-ms", "500", "--mock-tps", "200", "--mock-tokens", "8"]
    return [
        "--profile",
        "full-store",
        "--sweep",
        points,
        "--duration-secs",
        f"{duration_s:g}",
        "--warmup-secs",
        "1",
        *mock,
    ]


@dataclass(frozen=True, slots=True)
class Point:
    """One concurrency point, relative to the direct mock of the same run."""

    concurrency: int
    throughput_ratio: float  # server turns/s ÷ direct turns/s
    latency_ratio: float  # server turn p95 (or p50) ÷ direct's
    rss_mb: float | None  # the server's peak RSS

    def regressions(self, base: Point, threshold: float) -> list[str]:
        """What got worse than `base` by more than `threshold`, as sentences."""
        found: list[str] = []
        worse = f"by more than {threshold:.0%}"
        if self.throughput_ratio < base.throughput_ratio * (1 - threshold):
            found.append(f"throughput ratio {self.throughput_ratio:.3f} fell from {base.throughput_ratio:.3f} {worse}")
        if self.latency_ratio > base.latency_ratio * (1 + threshold):
            found.append(f"latency ratio {self.latency_ratio:.3f} rose from {base.latency_ratio:.3f} {worse}")
        if self.rss_mb is not None and base.rss_mb is not None and self.rss_mb > base.rss_mb * (1 + threshold):
            found.append(f"peak RSS {self.rss_mb:.1f} MB rose from {base.rss_mb:.1f} MB {worse}")
        return [f"c={self.concurrency}: {text}" for text in found]


def points(report: dict[str, Any]) -> list[Point]:
    """The gate's figures from a sweep report (its JSON)."""
    rows = {(row["target"], row["concurrency"]): row for row in report["rows"]}
    found = []
    for c in POINTS:
        server, direct = rows[("server", c)], rows[("direct", c)]
        found.append(
            Point(
                concurrency=c,
                throughput_ratio=round(server["turns_per_s"] / direct["turns_per_s"], 4),
                latency_ratio=_latency_ratio(server, direct),
                rss_mb=server.get("server_rss_mb_peak"),
            )
        )
    return found


def _latency_ratio(server: dict[str, Any], direct: dict[str, Any]) -> float:
    """Turn p95 ÷ turn p95, or p50 ÷ p50 where either side had too few turns for a p95."""
    both_p95 = server["turn_ms"]["p95"] is not None and direct["turn_ms"]["p95"] is not None
    key = "p95" if both_p95 else "p50"
    values = server["turn_ms"][key], direct["turn_ms"][key]
    if not all(values):
        raise ValueError(f"c={server['concurrency']}: no turn latency measured")
    return round(float(values[0]) / float(values[1]), 4)


def measure(sweep_args: list[str]) -> tuple[list[Point], dict[str, Any]]:
    """Run the sweep in a child process (the documented command) and read its report."""
    with tempfile.TemporaryDirectory(prefix="agentos-gate-") as out:
        argv = [sys.executable, "-m", "agentos", "bench", "sweep", *sweep_args, "--out-dir", out, "--name", "gate"]
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        (path,) = Path(out).glob("*.json")
        report = json.loads(path.read_text())
    return points(report), report


def judge(now: list[Point], base: list[Point], threshold: float) -> list[str]:
    by_c = {p.concurrency: p for p in base}
    return [
        text
        for point in now
        if point.concurrency in by_c
        for text in point.regressions(by_c[point.concurrency], threshold)
    ]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--baseline", type=Path, default=BASELINE, help="the committed baseline (JSON)")
    p.add_argument("--threshold", type=float, default=0.20, help="how much worse counts as a regression")
    p.add_argument("--attempts", type=int, default=3, help="measure again after a regression, up to this many times")
    p.add_argument("--update", action="store_true", help="measure and write the baseline instead of judging")
    p.add_argument("--duration-secs", type=float, default=DURATION_S, help="measured seconds per point")


def run_gate(args: argparse.Namespace) -> int:
    sweep = sweep_args(args.duration_secs)
    if args.update:
        found, report = measure(sweep)
        write_baseline(args.baseline, found, report, sweep)
        print(f"baseline written to {args.baseline}: commit it with the change that moved it")
        return 0
    try:
        base = read_baseline(args.baseline)
    except (OSError, KeyError, ValueError) as exc:
        print(f"bench gate: no usable baseline at {args.baseline} ({exc}); write one with --update", file=sys.stderr)
        return 2
    for attempt in range(1, args.attempts + 1):
        found, _ = measure(sweep)
        regressions = judge(found, base, args.threshold)
        for point in found:
            print(f"attempt {attempt}: {_describe(point)}")
        if not regressions:
            print("bench gate: no regression")
            return 0
        print(f"attempt {attempt} of {args.attempts}: " + "; ".join(regressions))
    print("bench gate: a regression in every attempt", file=sys.stderr)
    return 1


def _describe(point: Point) -> str:
    rss = f"{point.rss_mb:.1f} MB" if point.rss_mb is not None else "–"
    return (
        f"c={point.concurrency}: throughput {point.throughput_ratio:.3f} of direct, "
        f"turn latency {point.latency_ratio:.3f} of direct, peak RSS {rss}"
    )


def write_baseline(path: Path, found: list[Point], report: dict[str, Any], sweep: list[str]) -> None:
    body = {
        "kind": "bench-gate-baseline",
        "created_utc": report.get("created_utc"),
        "machine": report.get("machine"),
        "versions": report.get("versions"),
        "command": "agentos bench gate --update",
        "sweep": "agentos bench sweep " + " ".join(sweep),
        "points": [
            {
                "concurrency": p.concurrency,
                "throughput_ratio": p.throughput_ratio,
                "latency_ratio": p.latency_ratio,
                "rss_mb": p.rss_mb,
            }
            for p in found
        ],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(body, indent=2) + "\n")


def read_baseline(path: Path) -> list[Point]:
    body = json.loads(path.read_text())
    return [Point(p["concurrency"], p["throughput_ratio"], p["latency_ratio"], p["rss_mb"]) for p in body["points"]]
