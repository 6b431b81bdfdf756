"""Short real runs: the mock and the Agent OS server as processes, the report written.

Not a unit test on purpose: the point is that the whole kit works against the real server.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentos.mock.server import MockSettings
from agentos_bench.load.sweep import run_sweep
from agentos_bench.load.sweep_plan import SweepPlan
from agentos_bench.memory.staircase import MemoryPlan, run_memory
from agentos_bench.report.document import load_report, write_report

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (ROOT / "src/agentos/server.py").exists(), reason="no server yet"),
]


async def test_short_sweep_against_the_real_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # anywhere: the profiles are package data
    plan = SweepPlan(
        points=(1, 4),
        profiles=("no-store",),
        duration_s=1.5,
        warmup_s=0.5,
        settle_s=0.1,
        mock=MockSettings(ttft_ms=50.0, tps=400.0, tokens=4),
        command="pytest",
    )
    report = await run_sweep(plan)
    rows = {(r["target"], r["concurrency"]): r for r in report["rows"]}
    assert set(rows) == {("direct", 1), ("direct", 4), ("server", 1), ("server", 4)}
    for row in rows.values():
        assert row["turns_ok"] > 0 and row["failures_total"] == 0
        assert row["ttft_ms"]["p50"] >= 50
        assert row["ttft_ms"]["n"] == row["turn_ms"]["n"] == row["turns_ok"]
    server = rows[("server", 4)]
    assert server["mock_max_concurrent"] == 4
    assert server["server_cpu_cores"] > 0 and server["server_rss_mb_peak"] > 10
    write_report(report, tmp_path, "sweep")
    assert load_report(tmp_path / "sweep.json")["profiles"] == ["no-store"]
    assert (tmp_path / "sweep-throughput-ratio.png").exists() and (tmp_path / "sweep-ttft-overhead.png").exists()


async def test_short_memory_staircase(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # anywhere: the profiles are package data
    plan = MemoryPlan(sessions=4, session_ttl_s=1.0, settle_s=0.05, release_settle_s=0.2, input_bytes=2048)
    report = await run_memory(plan)
    assert [s["items"] for s in report["steps"]] == [0, 1, 2, 3, 4] and report["input_bytes"] == 2048
    assert report["failed_turns"] == 0
    assert report["summary"]["base_mb"]["rss"] > 10
    assert set(report["release"]) == {"after_delete", "after_ttl"}
    assert report["top"]["agentos_active_sessions"] == 4
    assert report["release"]["after_delete"]["agentos_active_sessions"] == 2
    assert report["release"]["after_ttl"]["agentos_active_sessions"] == 0
