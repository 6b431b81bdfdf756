"""`agentos bench overload` at a tiny size, and its pure parts.

Not a performance test (nothing here asserts a time): it keeps the bench from rotting. The run
must fill the gate, answer every fresh-connection turn probe 429 (Retry-After, `overloaded`)
and every /healthz 200, complete the admitted turns, and write a report that carries the figures.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentos_bench.overload.bench import run_overload
from agentos_bench.overload.plan import OverloadPlan, config_toml
from agentos_bench.overload.probe import error_code, parse_head
from agentos_bench.overload.report import distribution_ms, write_overload_report

TINY = OverloadPlan(
    max_in_flight=4,
    offered=12,
    ttft_ms=300,
    tokens=10,
    tps=10,
    retry_pause_ms=50,
    probes=20,
    probe_interval_ms=10,
    warmup_s=0.5,
    grace_s=5,
    command="agentos bench overload (the tiny test)",
)


@pytest.mark.slow
def test_tiny_run_refuses_every_probe_and_completes_the_admitted_turns(tmp_path: Path) -> None:
    assert TINY.turn_s > TINY.warmup_s + TINY.window_s  # no slot frees while the probes run

    report = run_overload(TINY, tmp_path / "work")

    summary = report["summary"]
    assert report["probes"]["turn"]["statuses"] == {"429": 20}
    assert report["probes"]["turn"]["codes"] == {"overloaded": 20}
    assert report["probes"]["healthz"]["statuses"] == {"200": 20}
    assert report["load"]["completed"] == 4  # the gate's worth, each turn outlasting the window
    assert summary["valid"] is True
    assert summary["refused_429_ms"]["n"] == 20 and summary["refused_429_ms"]["p50"] > 0
    assert report["load_refusals_during_probes"] > 0 and summary["server_cpu_ms_per_request_during_probes"] > 0
    json_path, md_path = write_overload_report(report, tmp_path / "out", "tiny-overload")
    assert json_path.stat().st_size > 0
    text = md_path.read_text()
    assert "turn POST answered 429" in text and TINY.command in text


def test_distribution_reports_a_tail_percentile_only_with_enough_samples() -> None:
    assert distribution_ms([0.001, 0.002, 0.003]) == {"n": 3, "p50": 2.0, "p90": None, "p99": None, "max": 3.0}
    many = distribution_ms([i / 1000 for i in range(1, 101)])
    assert (many["p50"], many["p90"], many["p99"], many["max"]) == (50.0, 90.0, 99.0, 100.0)
    assert distribution_ms([]) == {"n": 0, "p50": None, "p90": None, "p99": None, "max": None}


def test_probe_parses_a_response_head_and_an_error_body() -> None:
    head = b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\nContent-Length: 12\r\n\r\n"
    assert parse_head(head) == (429, {"retry-after": "1", "content-length": "12"})
    with pytest.raises(ValueError):
        parse_head(b"garbage\r\n\r\n")
    assert error_code(b'{"error": {"code": "overloaded", "message": "m"}}') == "overloaded"
    assert error_code(b"<html>") == "not_json"


def test_config_puts_the_gate_at_max_in_flight_with_permits_for_every_offered_turn() -> None:
    text = config_toml(OverloadPlan(max_in_flight=7, offered=21))
    assert "max_in_flight_turns = 7" in text and "concurrency_limit = 21" in text
    assert "access_log = true" in text
