"""`agentos bench memory`'s workloads at toy size, against the real server and mock processes:
idle sessions, runs waiting for a human, ready sandboxes (or the reason there are none), and the
columns beside RSS (the Python heap with `--tracemalloc`, the C heap, the trims of the reclaim)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentos_bench.memory.heap import heap_columns
from agentos_bench.memory.sandboxes import point_sizes
from agentos_bench.memory.staircase import MemoryPlan, run_memory
from agentos_bench.memory.workloads import turn_input
from agentos_bench.report.document import write_report

pytestmark = pytest.mark.slow


def test_heap_columns_and_sandbox_points() -> None:
    figures = {
        "rss_bytes": 1,
        "allocated_blocks": 7,
        "malloc": {"in_use_bytes": 2 * 1024 * 1024, "free_bytes": 1024 * 1024},
        "tracemalloc": None,
        "trim": {"trims": 1, "released_bytes": 3 * 1024 * 1024, "last_ms": 1.5},
    }
    columns = heap_columns(figures)
    assert columns == {"blocks": 7, "malloc_used_mb": 2.0, "malloc_free_mb": 1.0} | {
        "trims": 1,
        "trim_released_mb": 3.0,
        "trim_last_ms": 1.5,
    }
    assert turn_input(0) == "hello" and len(turn_input(1000)) == 1000 and turn_input(1000).startswith("lorem ipsum")
    assert point_sizes(32, 4) == [0, 8, 16, 24, 32] and point_sizes(3, 4) == [0, 1, 2, 3] and point_sizes(0, 4) == [0]


async def test_idle_sessions_with_the_python_heap_and_the_trim_after_their_ttl(tmp_path: Path) -> None:
    plan = MemoryPlan(
        workload="idle",
        sessions=6,
        step=2,
        session_ttl_s=1.0,
        settle_s=0.05,
        release_settle_s=0.2,
        tracemalloc=True,
        server_env=(("AGENTOS_MEMORY_TRIM_AFTER_EVICTIONS", "2"),),
    )
    report = await run_memory(plan)
    assert [s["items"] for s in report["steps"]] == [0, 2, 4, 6] and report["failed_turns"] == 0
    assert report["top"]["agentos_active_sessions"] == 6
    for step in report["steps"]:
        assert step["heap_mb"] > 1 and step["blocks"] > 0 and step["malloc_used_mb"] > 0
    after_ttl = report["release"]["after_ttl"]
    assert after_ttl["agentos_active_sessions"] == 0 and after_ttl["agentos_sessions_evicted_total"] == 3
    assert after_ttl["trims"] == 1  # three evicted, two needed: one trim
    assert {"rss", "private_dirty", "heap", "malloc_used", "blocks"} <= set(
        report["summary"]["marginal_kb_per_session"]
    )
    write_report(report, tmp_path, "idle")
    markdown = (tmp_path / "idle.md").read_text()
    assert "marginal cost per idle session (opened, no turn)" in markdown and "Python heap (tracemalloc)" in markdown


async def test_runs_waiting_for_a_human_are_climbed_and_answered(tmp_path: Path) -> None:
    report = await run_memory(MemoryPlan(workload="waiting", profile="runs", sessions=2, settle_s=0.05))
    assert report["mock"]["scenario"] == "tools" and report["failed_turns"] == 0
    assert [s["items"] for s in report["steps"]] == [0, 1, 2]
    assert report["release"]["after_end"]["runs_answered"] == 2 == report["release"]["after_end"]["runs_ended"]
    assert "after_end_mb" in report["summary"]
    write_report(report, tmp_path, "waiting")
    assert "agent run waiting for a human" in (tmp_path / "waiting.md").read_text()


async def test_ready_sandboxes_are_measured_or_the_report_says_why_not(tmp_path: Path) -> None:
    plan = MemoryPlan(workload="sandbox", profile="runs", sessions=2, sandbox_points=2, settle_s=0.05)
    report = await run_memory(plan)
    write_report(report, tmp_path, "sandbox")
    markdown = (tmp_path / "sandbox.md").read_text()
    if report["skipped"]:  # not root, or no namespaces: said, not crashed
        assert report["steps"] == [] and "**Not measured:**" in markdown
        return
    assert [s["items"] for s in report["steps"]] == [0, 1, 2] and report["points"] == [0, 1, 2]
    assert report["summary"]["marginal_kb_per_session"]["private_dirty"] > 0
    assert "ready sandbox" in markdown
