"""`agentos bench fallback`: its phases, breaker moments and verdict on made-up data (the
arithmetic, not timing), the server config it writes, and a tiny real campaign (two mock
processes, one server, 20 users, 6 s, the primary failing from 2 s to 4 s)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentos_bench.common.processes import resolve_profile
from agentos_bench.fallback.cli import main
from agentos_bench.fallback.findings import Phase, breaker_moments, failed_turns, p95_difference, phase_table, verdict
from agentos_bench.fallback.metrics import Scrape, TargetFigures, provider_figures
from agentos_bench.fallback.plan import PRIMARY, SECONDARY, FallbackPlan, server_config
from agentos_bench.load.targets import TurnSample

ORIGIN = 100.0  # loop time of the window's start


def _turn(at_s: float, ttft_ms: float, failure: Any = None) -> TurnSample:
    started = ORIGIN + at_s
    return TurnSample(started, started + 0.5, None if failure else ttft_ms / 1000, failure)


def _scrape(at_s: float, state: int, requests: int = 0, failures: int = 0) -> Scrape:
    figures = TargetFigures(requests=requests, breaker=state, failures={"provider_http_error": failures})
    return Scrape(ORIGIN + at_s - 0.01, ORIGIN + at_s, {PRIMARY: figures})


def test_turns_fall_in_the_phase_they_were_sent_in_and_failures_are_counted_by_kind() -> None:
    samples = [_turn(t / 10, 100) for t in range(20)] + [_turn(2.0 + t / 10, 130) for t in range(20)]
    samples += [_turn(-1.0, 0, "5xx"), _turn(4.5, 0, "timeout")]
    table = phase_table(samples, ORIGIN, [Phase("before", 0, 2), Phase("open", 2, 4), Phase("after", 4, 6)])
    assert table["before"]["turns"] == table["open"]["turns"] == 20 and table["before"]["ttft_ms"]["p95"] == 100.0
    assert table["after"] == table["after"] | {"turns": 1, "completed": 0, "failed": 1, "failures": {"timeout": 1}}
    assert p95_difference(table, "open") == 30.0 and p95_difference(table, "after") is None  # no TTFT after
    assert failed_turns(samples) == {"turns": 42, "failed": 2, "by_kind": {"5xx": 1, "timeout": 1}}  # warm-up too


def test_the_breaker_counts_as_open_from_the_scrape_after_which_it_stayed_open() -> None:
    scrapes = [
        _scrape(1.9, 0, 100),
        _scrape(2.05, 1, 110, 5),
        _scrape(2.1, 0, 112, 6),
        _scrape(2.2, 0, 120, 8),
        _scrape(2.3, 1, 125, 12),
        _scrape(3.0, 2, 126, 13),
        _scrape(3.9, 1, 127, 14),
        _scrape(4.1, 1, 127, 14),
        _scrape(4.2, 0, 140, 14),
    ]
    b = breaker_moments(scrapes, ORIGIN, PRIMARY, 2.0, 4.0)
    assert (b["first_open_after_s"], b["first_open_after_s_at_least"]) == (pytest.approx(0.05), 0.0)
    assert (b["opened_after_s"], b["opened_after_s_at_least"]) == (pytest.approx(0.3), pytest.approx(0.19))
    assert b["closed_again_before_held"] == 1 and b["half_open_seen"] == 1
    assert (b["failures_until_open"], b["calls_while_open"], b["failures_while_open"]) == (12, 2, 2)
    assert b["closed_after_fault_end_s"] == pytest.approx(0.2)
    assert b["state_changes"][:3] == [[1.9, 0], [2.05, 1], [2.1, 0]]
    never = breaker_moments([_scrape(2.5, 0), _scrape(3.9, 1), _scrape(4.5, 0)], ORIGIN, PRIMARY, 2.0, 4.0)
    assert never["first_open_after_s"] == pytest.approx(1.9) and never["opened_after_s"] == pytest.approx(1.9)
    closed_at_end = breaker_moments([_scrape(2.5, 1), _scrape(3.9, 0)], ORIGIN, PRIMARY, 2.0, 4.0)
    assert closed_at_end["opened_after_s"] is None and "calls_while_open" not in closed_at_end


def _fault(**changes: Any) -> dict[str, Any]:
    run = {
        "primary": PRIMARY,
        "failed_turns": {"turns": 100, "failed": 0, "by_kind": {}},
        "ttft_p95_added_ms": 12.0,
        "breaker": {"opened_after_s": 0.4, "opened_after_s_at_least": 0.35, "first_open_after_s": 0.1},
        "targets": {PRIMARY: {"failures": {"provider_http_error": 7}, "fallbacks": 7}},
    }
    return run | changes


def test_the_verdict_meets_a_target_only_on_its_number() -> None:
    assert all(v["met"] for v in verdict(_fault()).values()) and len(verdict(_fault())) == 4
    bad = verdict(
        _fault(
            failed_turns={"turns": 100, "failed": 1, "by_kind": {"5xx": 1}},
            ttft_p95_added_ms=50.1,
            breaker={"opened_after_s": 1.01, "opened_after_s_at_least": 0.9, "first_open_after_s": 0.1},
            targets={PRIMARY: {"failures": {}, "fallbacks": 0}},
        )
    )
    assert not any(v["met"] for v in bad.values())
    unknown = verdict(_fault(ttft_p95_added_ms=None, breaker={"opened_after_s": None}))  # too few samples, never open
    assert [v["met"] for v in unknown.values()] == [True, True, False, False]
    edge = verdict(_fault(ttft_p95_added_ms=50.0, breaker={**_fault()["breaker"], "opened_after_s": 1.0}))
    assert all(v["met"] for v in edge.values())  # the limits themselves are met


def test_provider_figures_are_read_from_a_metrics_answer() -> None:
    p, s = f'target="{PRIMARY}"', f'target="{SECONDARY}"'
    text = "\n".join(
        [
            "# TYPE agentos_provider_requests counter",
            f"agentos_provider_requests_total{{{p}}} 12.0",
            "# TYPE agentos_provider_failures counter",
            f'agentos_provider_failures_total{{reason="provider_http_error",{p}}} 5.0',
            f"agentos_provider_fallbacks_total{{{p}}} 5.0",
            f"agentos_provider_breaker_state{{{p}}} 1.0",
            f"agentos_provider_requests_total{{{s}}} 7.0",
            f'agentos_provider_ttft_seconds_bucket{{le="0.005",{s}}} 3.0',
            f"agentos_provider_ttft_seconds_sum{{{s}}} 0.5",
            f"agentos_provider_ttft_seconds_count{{{s}}} 5.0",
            'agentos_turns_total{status="completed"} 9.0',
            "",
        ]
    )
    found = provider_figures(text, buckets=True)
    assert found[PRIMARY] == TargetFigures(requests=12, fallbacks=5, breaker=1, failures={"provider_http_error": 5})
    assert (found[SECONDARY].requests, found[SECONDARY].ttft_count, found[SECONDARY].ttft_sum_s) == (7, 5, 0.5)


def test_the_server_config_routes_one_model_over_both_mocks_and_checks_the_kernel_limits(tmp_path: Path) -> None:
    plan = FallbackPlan(users=1000, breaker_cooldown_s=5.0)
    text = server_config(plan, resolve_profile("full-store"), "http://127.0.0.1:1/v1", "http://127.0.0.1:2/v1")
    assert 'default_model = "m"' in text and "breaker_cooldown_s = 5" in text and "max_retries = 0" in text
    assert text.index("[providers.primary]") < text.index("[providers.secondary]")
    small = tmp_path / "small.toml"
    small.write_text("[kernel]\nconcurrency_limit = 64\n")
    with pytest.raises(ValueError, match="concurrency_limit"):
        server_config(plan, small, "http://127.0.0.1:1/v1", "http://127.0.0.1:2/v1")
    assert FallbackPlan(seconds=10, fault_at_s=5, fault_for_s=6).problems()  # the fault outlasts the window


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_tiny_campaign_falls_back_and_writes_its_report(tmp_path: Path) -> None:
    out = tmp_path / "out"
    argv = [
        "--users",
        "20",
        "--seconds",
        "6",
        "--fault-at",
        "2",
        "--fault-for",
        "2",
        "--mock-ttft-ms",
        "50",
        "--breaker-cooldown-s",
        "1",
        "--warmup-secs",
        "1",
        "--out-dir",
        str(out),
        "--keep-dir",
        str(tmp_path / "run"),
    ]
    assert main(argv) == 0
    (json_path,) = out.glob("*-fallback.json")
    report = json.loads(json_path.read_text())
    fault, control = report["fault"], report["control"]
    assert report["kind"] == "fallback" and report["command"].startswith("agentos bench fallback --users 20")
    assert set(fault["phases"]) == {"before", "opening", "open", "after"}
    assert set(control["phases"]) == {"before", "during", "after"}
    assert fault["failed_turns"]["failed"] == control["failed_turns"]["failed"] == 0
    assert fault["breaker"]["opened_after_s"] is not None and fault["breaker"]["closed_after_fault_end_s"] is not None
    assert fault["mock_calls"]["primary"]["errors_injected"] > 0 and fault["mock_calls"]["secondary"]["completed"] > 0
    assert control["mock_calls"]["secondary"]["requests"] == 0  # without the fault nothing falls back
    assert fault["targets"][PRIMARY]["fallbacks"] == fault["mock_calls"]["primary"]["errors_injected"]
    assert set(fault["against_control"]) == {
        "control_ttft_p95_difference_ms",
        "open_ttft_p95_over_control",
        "open_turns_per_s_over_control",
    }
    assert len(report["verdict"]) == 4 and report["verdict"]["0 failed turns"]["met"]
    assert "## Verdict" in json_path.with_suffix(".md").read_text()
