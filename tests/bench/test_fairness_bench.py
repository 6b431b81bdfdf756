"""`agentos bench fairness`, for real: the mock and the server as processes, two tenants with keys
made through the admin API, the report written. Tiny windows: this checks the kit, not the numbers."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentos.mock.server import MockSettings
from agentos_bench.load.fairness import FairnessPlan, run_fairness, summarize
from agentos_bench.load.fairness_doc import write_fairness
from agentos_bench.load.tenant_keys import AdminKeys


@pytest.mark.slow
async def test_a_short_fairness_run_measures_each_tenant_with_its_own_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # anywhere: the profiles are package data
    plan = FairnessPlan(
        users=2,
        ratio=3,
        concurrency_limit=4,
        reserves=(0.25,),
        warmup_s=0.3,
        duration_s=1.5,
        mock=MockSettings(ttft_ms=50.0, tps=400.0, tokens=4),
        command="pytest",
    )
    report = await run_fairness(plan, AdminKeys())
    rows = {(r["phase"], r["tenant"]): r for r in report["rows"]}
    assert set(rows) == {("B alone", "B"), ("B with A", "B"), ("B with A", "A")}
    assert (rows["B with A", "A"]["concurrency"], rows["B with A", "B"]["concurrency"]) == (6, 2)
    for row in rows.values():
        assert row["turns_ok"] > 0 and row["failures_total"] == 0, row
    (summary,) = report["summary"]
    assert summary["variant"] == "fair_reserve=0.25"  # (too few turns here for a p95: ratio may be None)
    written = write_fairness(report, tmp_path)
    assert [p.suffix for p in written] == [".json", ".md"]
    assert "B TTFT p95 alone" in written[1].read_text()


def test_the_summary_is_the_ratio_of_bs_p95_with_a_to_alone() -> None:
    def row(phase: str, tenant: str, p95: float) -> dict[str, object]:
        return {"variant": "v", "phase": phase, "tenant": tenant, "ttft_ms": {"p95": p95}}

    rows = [row("B alone", "B", 100.0), row("B with A", "B", 109.0), row("B with A", "A", 900.0)]
    assert summarize(rows) == [
        {
            "variant": "v",
            "b_ttft_p95_alone_ms": 100.0,
            "b_ttft_p95_with_a_ms": 109.0,
            "ratio": 1.09,
            "meets_target": True,
        }
    ]
    rows[1] = row("B with A", "B", 111.0)
    assert summarize(rows)[0]["meets_target"] is False
