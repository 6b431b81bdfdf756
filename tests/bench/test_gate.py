"""`agentos bench gate`: the regression alarm CI runs (its judging, then the real command at toy size)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import child_env

from agentos_bench.gate import POINTS, Point, judge, points, read_baseline, write_baseline


def report(server_tps: float, server_p95: float, rss: float) -> dict[str, Any]:
    rows = []
    for c in POINTS:
        rows.append(
            {"target": "direct", "concurrency": c, "turns_per_s": 100.0, "turn_ms": {"p50": 280.0, "p95": 300.0}}
        )
        rows.append(
            {
                "target": "server",
                "concurrency": c,
                "turns_per_s": server_tps,
                "turn_ms": {"p50": server_p95 - 10, "p95": server_p95 if c > 1 else None},
                "server_rss_mb_peak": rss,
            }
        )
    return {"rows": rows, "created_utc": "2026-12-06T00:00:00Z", "machine": {"cpu": "test"}}


def test_ratios_are_against_the_direct_mock_of_the_same_run() -> None:
    found = points(report(95.0, 330.0, 100.0))
    assert [p.concurrency for p in found] == list(POINTS)
    assert found[1] == Point(64, 0.95, 1.1, 100.0)
    assert found[0].latency_ratio == round(320.0 / 280.0, 4)  # no p95 at c = 1: p50 against p50


def test_twenty_percent_worse_is_a_regression_and_less_is_not() -> None:
    base = points(report(95.0, 330.0, 100.0))
    assert judge(points(report(80.0, 380.0, 115.0)), base, 0.20) == []
    slower = judge(points(report(70.0, 330.0, 100.0)), base, 0.20)
    assert len(slower) == len(POINTS) and all("throughput ratio" in text for text in slower)
    later = judge(points(report(95.0, 420.0, 100.0)), base, 0.20)
    assert len(later) == len(POINTS) and all("latency ratio" in text for text in later)  # c = 1: p50s, 410 vs 320
    fatter = judge(points(report(95.0, 330.0, 125.0)), base, 0.20)
    assert len(fatter) == len(POINTS) and all("peak RSS" in text for text in fatter)


def test_the_baseline_round_trips(tmp_path: Path) -> None:
    found = points(report(95.0, 330.0, 100.0))
    write_baseline(tmp_path / "gate.json", found, report(95.0, 330.0, 100.0), ["--sweep", "1"])
    assert read_baseline(tmp_path / "gate.json") == found
    assert json.loads((tmp_path / "gate.json").read_text())["machine"] == {"cpu": "test"}


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_gate_at_toy_size_writes_a_baseline_then_passes_against_it(tmp_path: Path) -> None:
    baseline = tmp_path / "gate.json"
    gate = [sys.executable, "-m", "agentos", "bench", "gate", "--baseline", str(baseline), "--duration-secs", "1"]
    made = subprocess.run([*gate, "--update"], capture_output=True, text=True, env=child_env(), timeout=120)
    assert made.returncode == 0, made.stderr[-2000:]
    assert {p.concurrency for p in read_baseline(baseline)} == set(POINTS)
    # A generous threshold: one-second points on a shared machine judge nothing but the plumbing.
    judged = subprocess.run(
        [*gate, "--threshold", "5", "--attempts", "1"], capture_output=True, text=True, env=child_env(), timeout=120
    )
    assert judged.returncode == 0, judged.stdout[-2000:] + judged.stderr[-2000:]
    assert "bench gate: no regression" in judged.stdout
    missing = subprocess.run(
        [*gate[:-4], "--baseline", str(tmp_path / "none.json")],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=60,
    )
    assert missing.returncode == 2 and "write one with --update" in missing.stderr
