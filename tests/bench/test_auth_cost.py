"""`agentos bench auth-cost` at a tiny size: the real server as processes, A (open) and B (keys).

Not a performance test (nothing here asserts a time): it keeps the bench from rotting. The run
must provision keys through the admin API, read every session with 200s, see the RateLimit
headers on every answer of B and none of A, and write a report that carries every figure.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentos_bench.authcost.bench import run_auth_cost, summarize
from agentos_bench.authcost.plan import AuthCostPlan
from agentos_bench.authcost.report import write_auth_cost_report
from agentos_bench.micro.auth import micro_bench

TINY = AuthCostPlan(
    rounds=1,
    requests=200,
    concurrency=4,
    tenants=2,
    keys_per_tenant=2,
    warmup_requests=20,
    micro_calls=50,
    command="agentos bench auth-cost (the tiny test)",
)


@pytest.mark.slow
def test_tiny_run_reads_every_session_and_reports_the_difference(tmp_path: Path) -> None:
    report = run_auth_cost(TINY, tmp_path / "work")

    assert [(r["mode"], r["ok"], r["errors"]) for r in report["rounds"]] == [("open", 200, 0), ("keys", 200, 0)]
    open_round, keys_round = report["rounds"]
    assert open_round["rate_headers"] == 0  # the open principal has no limits
    assert keys_round["rate_headers"] == 200  # the limiter answered every keyed request
    assert all(r["server_cpu_s"] > 0 and r["requests_per_s"] > 0 for r in report["rounds"])
    summary = report["summary"]
    assert summary["valid"] is True
    assert summary["added_cpu_ms_per_request"] == pytest.approx(
        keys_round["server_cpu_ms_per_request"] - open_round["server_cpu_ms_per_request"]
    )
    micro = report["micro"]
    assert micro["keys"] == 4
    assert micro["keyed_path_us"] > micro["authenticate_us"] > micro["hmac_us"] > 0
    assert "tenant_filter_us" in micro  # B's sessions.db was there to read

    json_path, md_path = write_auth_cost_report(report, tmp_path / "out", "tiny-auth-cost")
    assert json_path.stat().st_size > 0
    text = md_path.read_text()
    assert "B - A" in text and "keys-1" in text and TINY.command in text


def _round(mode: str, ok: int, rate_headers: int) -> dict[str, object]:
    return {
        "mode": mode,
        "requests": 10,
        "ok": ok,
        "timed_out": False,
        "rate_headers": rate_headers,
        "server_cpu_ms_per_request": 0.2,
        "requests_per_s": 100.0,
        "client_cpu_ms_per_request": 0.1,
    }


def test_a_refused_request_or_a_missing_header_makes_the_run_invalid() -> None:
    plan = AuthCostPlan(rounds=1, requests=10)
    assert summarize([_round("open", 10, 0), _round("keys", 10, 10)], plan)["valid"] is True
    assert summarize([_round("open", 10, 0), _round("keys", 9, 10)], plan)["valid"] is False  # a 429, say
    assert summarize([_round("open", 10, 0), _round("keys", 10, 9)], plan)["valid"] is False  # limiter skipped


def test_micro_bench_alone_without_a_store() -> None:
    micro = micro_bench(tenants=1, keys_per_tenant=3, calls=20)
    assert micro["keys"] == 3
    assert micro["added_us"] == pytest.approx(micro["keyed_path_us"] - micro["open_path_us"])
    assert "tenant_filter_us" not in micro
