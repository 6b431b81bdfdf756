"""Report files (JSON, Markdown with the header, PNG plots) and `bench compare`."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import msgspec
import pytest

from agentos.cli import main
from agentos_bench.memory.staircase import parse_gauges, summarize
from agentos_bench.report.compare import compare_reports, format_comparisons
from agentos_bench.report.document import load_report, write_report
from agentos_bench.report.machine import machine_info, machine_slug, result_stem, utc_now, versions
from agentos_bench.report.overhead import overhead_rows
from agentos_bench.report.plots import zero_based_limits


def _row(
    target: str, concurrency: int, p95: float, rss: float | None = None, profile: str | None = None
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "target": target,
        "profile": profile,
        "concurrency": concurrency,
        "duration_s": 10.0,
        "turns_ok": 100 * concurrency,
        "turns_per_s": 10.0 * concurrency,
        "ttft_ms": {"n": 100 * concurrency, "p50": p95 - 10, "p95": p95, "p99": p95 + 5},
        "turn_ms": {"n": 100 * concurrency, "p50": p95 + 30, "p95": p95 + 40, "p99": p95 + 50},
        "failures": {"429": 2} if concurrency > 1 else {},
        "failures_total": 2 if concurrency > 1 else 0,
        "setup_failures": 0,
        "mock_max_concurrent": concurrency,
    }
    if rss is not None:
        row |= {"server_rss_mb_peak": rss, "server_rss_mb_end": rss - 1, "server_cpu_cores": 0.5}
    return row


def _sweep(p95: float = 100.0, rss: float = 50.0) -> dict[str, Any]:
    rows = [_row("direct", c, 90.0) for c in (1, 4)]
    rows += [_row("server", c, p95, rss, "no-store") for c in (1, 4)]
    return {
        "kind": "sweep",
        "schema": 1,
        "created_utc": utc_now().isoformat(timespec="seconds"),
        "machine": machine_info(),
        "versions": versions(),
        "topology": "one machine",
        "profiles": ["no-store"],
        "mock": {"ttft_ms": 50.0},
        "command": "agentos bench sweep --sweep 1,4",
        "window": {"warmup_s": 1.0, "duration_s": 10.0, "turn_timeout_s": 60.0},
        "rows": rows,
        "notes": [],
    }


def _memory(rss_step_mb: float = 0.1) -> dict[str, Any]:
    steps = [
        {"sessions": n, "rss_mb": 40 + rss_step_mb * n, "private_dirty_mb": 20 + rss_step_mb * n} for n in range(11)
    ]
    marks = {
        "after_delete": {"rss_mb": 40.5, "private_dirty_mb": 20.5},
        "after_ttl": {"rss_mb": 40.2, "private_dirty_mb": 20.2},
    }
    report = _sweep()
    del report["rows"], report["window"]
    return report | {
        "kind": "memory",
        "profile": "no-store",
        "sessions": 10,
        "session_ttl_s": 5.0,
        "settle_s": 0.2,
        "steps": steps,
        "release": marks,
        "summary": summarize(steps, marks, {"rss_mb": 39.0, "private_dirty_mb": 19.0}),
    }


def test_sweep_report_files_and_header(tmp_path: Path) -> None:
    paths = write_report(_sweep(), tmp_path, "2026-01-01-test-sweep-no-store")
    names = sorted(p.name for p in paths)
    assert names == sorted(
        f"2026-01-01-test-sweep-no-store{suffix}"
        for suffix in (".json", ".md", "-ttft-overhead.png", "-turn-overhead.png", "-throughput-ratio.png")
    )
    markdown = (tmp_path / "2026-01-01-test-sweep-no-store.md").read_text()
    for needle in (
        "**Machine:**",
        "cores",
        "**Versions:**",
        "aiohttp",
        "**Topology:**",
        "**Command:** `agentos bench sweep",
    ):
        assert needle in markdown
    assert "| 4 | 40.0 | 90 / 100 / 105 (n=400) | 130 / 140 / 150 (n=400) |" in markdown
    assert "429: 2" in markdown
    assert "### Server overhead against the direct row" in markdown
    assert load_report(tmp_path / "2026-01-01-test-sweep-no-store.json")["rows"][2]["profile"] == "no-store"
    assert all(p.stat().st_size > 1000 for p in paths if p.suffix == ".png")


def test_overhead_is_server_minus_direct() -> None:
    overhead = overhead_rows(_sweep(p95=150.0)["rows"])
    assert overhead[0] == {
        "profile": "no-store",
        "concurrency": 1,
        "n_server": 100,
        "n_direct": 100,
        "ttft_ms": {"p50": 60.0, "p95": 60.0, "p99": 60.0},
        "turn_ms": {"p50": 60.0, "p95": 60.0, "p99": 60.0},
        "turns_per_s_ratio": 1.0,
    }


def _few_turns(row: dict[str, Any], n: int) -> dict[str, Any]:
    """The row as a short window would give it: too few turns for p95 and p99 (stats.percentiles_ms)."""
    for metric in ("ttft_ms", "turn_ms"):
        row[metric] = {"n": n, "p50": row[metric]["p50"], "p95": None, "p99": None}
    return row | {"turns_ok": n}


def test_percentiles_without_enough_turns_show_a_dash_and_their_count(tmp_path: Path) -> None:
    report = _sweep(p95=150.0)
    report["rows"][2] = _few_turns(report["rows"][2], 3)  # server, c=1
    (overhead,) = [o for o in overhead_rows(report["rows"]) if o["concurrency"] == 1]
    assert overhead["ttft_ms"] == {"p50": 60.0, "p95": None, "p99": None} and overhead["n_server"] == 3
    write_report(report, tmp_path, "few")
    markdown = (tmp_path / "few.md").read_text()
    assert "| 1 | 10.0 | 140 / – / – (n=3) | 180 / – / – (n=3) |" in markdown
    assert "| no-store | 1 | 3 / 100 | 60 / – / – (n=3) |" not in markdown  # the overhead cell carries no n
    assert "| no-store | 1 | 3 / 100 | 60 / – / – | 60 / – / – | 1 |" in markdown
    assert "p95 at" in markdown and "p99 at" in markdown  # the rule is written next to the tables


def test_sweep_without_a_direct_row_plots_absolute_numbers(tmp_path: Path) -> None:
    report = _sweep()
    report["rows"] = [r for r in report["rows"] if r["target"] == "server"]
    names = {p.name for p in write_report(report, tmp_path, "abs")}
    assert names == {"abs.json", "abs.md", "abs-ttft.png", "abs-turn.png", "abs-throughput.png"}


def test_overhead_axis_holds_zero_and_every_value() -> None:
    """The old plot zoomed onto 2000–2120 ms; an overhead axis always starts from zero."""
    low, high = zero_based_limits([2.0, 3.0, 120.0])
    assert low < 0 < 2.0 and high > 120.0 and high < 140.0
    low, high = zero_based_limits([-5.0, 3.0])
    assert low < -5.0 and high > 3.0
    assert zero_based_limits([]) == (-0.25, 1.0)


def test_a_second_report_with_the_same_stem_never_overwrites_the_first(tmp_path: Path) -> None:
    first = write_report(_sweep(p95=100.0), tmp_path, "same")
    first_json = (tmp_path / "same.json").read_bytes()
    second = write_report(_sweep(p95=130.0), tmp_path, "same")
    assert {p.name for p in second}.isdisjoint({p.name for p in first})
    assert (tmp_path / "same-2.json") in second and (tmp_path / "same.json").read_bytes() == first_json
    assert "![TTFT overhead](same-2-ttft-overhead.png)" in (tmp_path / "same-2.md").read_text()


def test_memory_summary_and_report(tmp_path: Path) -> None:
    report = _memory()
    summary = report["summary"]
    assert summary["marginal_kb_per_session"]["rss"] == pytest.approx(102.4)
    assert summary["base_mb"]["rss"] == 40.0 and summary["end_mb"]["rss"] == 41.0
    assert summary["returned_mb"]["rss"] == pytest.approx(0.8)
    write_report(report, tmp_path, "mem")
    markdown = (tmp_path / "mem.md").read_text()
    assert "marginal cost per session with one completed turn (least squares over n=10 steps)" in markdown
    assert "![memory staircase](mem-staircase.png)" in markdown
    assert (tmp_path / "mem-staircase.png").exists()


def test_compare_flags_p95_growth_over_20_percent() -> None:
    comparisons = compare_reports(_sweep(p95=100.0), _sweep(p95=125.0))
    flagged = {(c.row, c.metric) for c in comparisons if c.regression}
    assert ("server:no-store:c=1", "ttft p95") in flagged
    assert not any(c.regression for c in comparisons if c.metric == "turns/s")
    assert "REGRESSION" in format_comparisons(comparisons)
    assert not any(c.regression for c in compare_reports(_sweep(p95=100.0), _sweep(p95=115.0)))


def test_compare_flags_rss_growth() -> None:
    assert any(c.regression and c.metric == "rss peak" for c in compare_reports(_sweep(rss=50.0), _sweep(rss=61.0)))
    assert any(c.regression for c in compare_reports(_memory(0.1), _memory(0.2)))


def test_compare_cli_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b, m = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "m.json"
    for path, report in ((a, _sweep(p95=100.0)), (b, _sweep(p95=130.0)), (m, _memory())):
        path.write_bytes(msgspec.json.encode(report))  # the JSON alone: plots are tested above
    assert main(["bench", "compare", str(a), str(a)]) == 0
    assert main(["bench", "compare", str(a), str(b)]) == 1
    assert "REGRESSION" in capsys.readouterr().out
    assert main(["bench", "compare", str(a), str(m)]) == 2
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    assert main(["bench", "compare", str(bad), str(a)]) == 2


def test_result_stem_names_utc_time_to_the_second_and_machine() -> None:
    info = {"cpu": "AMD EPYC 7B13 64-Core Processor", "cores": 2}
    assert machine_slug(info) == "2c-amd-epyc-7b13"
    when = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    stem = result_stem("sweep", "no-store+full-store", info, when)
    assert stem == "2026-01-02T030405Z-2c-amd-epyc-7b13-sweep-no-store+full-store"
    later = result_stem("sweep", "no-store+full-store", info, when + dt.timedelta(seconds=1))
    assert later != stem
    plus_two = dt.datetime(2026, 1, 2, 5, 4, 5, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert result_stem("sweep", "x", info, plus_two, "m") == "2026-01-02T030405Z-m-sweep-x"


def test_parse_gauges_reads_unlabelled_samples() -> None:
    text = "# HELP agentos_active_sessions x\nagentos_active_sessions 12.0\nagentos_sessions_evicted_total 3\nother 1\n"
    assert parse_gauges(text, ("agentos_active_sessions", "agentos_sessions_evicted_total")) == {
        "agentos_active_sessions": 12.0,
        "agentos_sessions_evicted_total": 3.0,
    }
