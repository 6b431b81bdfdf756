"""A short real `agentos bench runs`: the mock (`tools` scenario) and the server as processes.

Not a unit test on purpose: the point is that the runs bench works against the real server,
its sandbox and its journal, and that the report it writes has every field.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from agentos.mock.server import MockSettings
from agentos_bench.runs.bench import run_runs_bench
from agentos_bench.runs.plan import RunsPlan
from agentos_bench.runs.report import write_runs_report

ROOT = Path(__file__).resolve().parents[2]
STEPS_PER_RUN = 7  # 4 model calls + 2 run_command results + 1 human answer
ANSWER_DELAY_S = 0.3
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (ROOT / "src/agentos/server.py").exists(), reason="no server yet"),
]

POINT_FIELDS = {
    "runs",
    "human",
    "completed",
    "failures",
    "failures_total",
    "start_ms",
    "healthz_burst_ms",
    "cpu_peak_cores",
    "cpu_mean_cores",
    "cpu_peak_total_cores",
    "runs_per_core",
    "peak_concurrent_runs",
    "duration_ms",
    "duration_min_ms",
    "phase_ms",
    "wall_s",
    "model_calls",
    "tool_results",
    "human_answers",
    "steps",
    "steps_per_s",
    "mock_max_concurrent",
    "server_cpu_s",
    "server_cpu_cores",
    "server_cpu_ms_per_run",
    "server_cpu_ms_per_step",
    "server_main_cpu_s",
    "server_main_cpu_cores",
    "server_rss_mb_before",
    "server_rss_mb_peak",
    "server_rss_mb_end",
    "server_private_dirty_mb_before",
    "server_private_dirty_mb_peak",
    "server_private_dirty_mb_end",
    "server_processes_peak",
    "mock_cpu_s",
    "client_cpu_s",
}


@pytest.mark.timeout(40)
async def test_short_runs_bench_against_the_real_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # anywhere: the profiles are package data
    plan = RunsPlan(
        points=(5,),
        answer_delay_s=ANSWER_DELAY_S,
        run_timeout_s=10.0,
        waiting_runs=6,
        waiting_batches=2,
        waiting_timeout_s=10.0,
        settle_s=0.1,
        mock=MockSettings(ttft_ms=20.0, tps=1000.0, tokens=4, scenario="tools"),
        command="pytest",
    )
    report = await run_runs_bench(plan)

    (point,) = report["points"]
    assert set(point) == POINT_FIELDS
    assert point["completed"] == 5 and point["failures_total"] == 0
    assert point["model_calls"] == 5 * 4 and point["tool_results"] == 5 * 2 and point["human_answers"] == 5
    assert point["steps"] == 5 * STEPS_PER_RUN and point["steps_per_s"] > 0
    assert point["duration_min_ms"] >= ANSWER_DELAY_S * 1000
    assert ANSWER_DELAY_S * 1000 <= point["duration_ms"]["p50"] < 10_000
    assert point["duration_ms"]["n"] == 5 and point["duration_ms"]["p95"] is None  # 5 runs: no p95, no p99
    assert point["human"]["paused_share"] == 1.0 and point["human"]["answered"] == 5
    assert point["human"]["mean_wait_ms"] >= ANSWER_DELAY_S * 1000
    assert 0 < point["start_ms"]["p50"] < 5_000
    assert set(point["phase_ms"]) == {"queued", "model_call", "tool", "human_wait"}
    assert point["phase_ms"]["human_wait"]["p50"] >= ANSWER_DELAY_S * 1000
    # the five runs' model calls overlapped (all five at once is usual, not certain on a busy machine)
    assert 2 <= point["mock_max_concurrent"] <= 5
    assert point["server_cpu_s"] >= point["server_main_cpu_s"] > 0 and point["server_rss_mb_peak"] > 10
    assert point["server_processes_peak"] >= 2  # the server and its sandbox fork server

    waiting = report["waiting"]
    assert waiting["started"] == waiting["waiting_human"] == waiting["answered"] == 6
    assert waiting["statuses"] == {"completed": 6} and waiting["terminated"] == 0
    assert [s["waiting"] for s in waiting["steps"]] == [3, 6]
    assert waiting["base_mb"]["rss"] > 10 and waiting["after_end"]["rss_mb"] > 10
    assert waiting["per_waiting_run_kb"]["rss"] is not None
    assert waiting["marginal_kb_per_waiting_run"]["rss"] is not None

    paths = write_runs_report(report, tmp_path, "runs")
    assert {p.name for p in paths} == {"runs.json", "runs.md", "runs-duration.png"}
    assert msgspec.json.decode((tmp_path / "runs.json").read_bytes())["kind"] == "runs"
    markdown = (tmp_path / "runs.md").read_text()
    assert "- **Command:** `pytest`" in markdown and "## Runs waiting for a human" in markdown
    assert f"{point['duration_ms']['p50']:g} / – / – (n=5)" in markdown
    assert "least squares over n=2 bursts" in markdown
