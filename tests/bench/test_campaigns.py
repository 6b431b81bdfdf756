"""`agentos bench runs --campaign`: the campaigns' scripts in the mock, their plans, the noise
rule and the acceptance lines, and a short real campaign."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentos.mock.scenario import Scenario, plan_answer
from agentos_bench.runs.bench import peak_concurrency
from agentos_bench.runs.campaigns import CAMPAIGNS, campaign_plan, judge
from agentos_bench.runs.cli import main
from agentos_bench.runs.client import RunOutcome

AGENT_TOOLS = frozenset({"run_command", "ask_human"})


def _calls(scenario: Scenario) -> list[str]:
    """The tool names a run of `scenario` is asked to call, step by step, until the answer."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    names = []
    while (call := plan_answer(scenario, messages, 4, AGENT_TOOLS).tool_call) is not None:
        names.append(call.name)
        messages.append({"role": "tool", "tool_call_id": call.call_id, "content": "ok"})
        assert len(names) < 10
    return names


def test_the_campaign_scripts() -> None:
    assert _calls("light") == ["run_command", "run_command"]
    assert _calls("heavy") == ["run_command", "ask_human", "run_command"]
    assert _calls("tools") == ["run_command", "run_command", "ask_human"]  # hitl: a question after two tools
    heavy = plan_answer("heavy", [{"role": "user", "content": "go"}], 4, AGENT_TOOLS).tool_call
    assert heavy is not None and "sleep 10" in heavy.arguments


def test_campaign_plans_and_their_scale() -> None:
    heavy = campaign_plan(CAMPAIGNS["heavy"], 1.0, "c")
    assert heavy.points == (50, 100, 200) and heavy.mock.tokens == 300 and heavy.mock.tps == pytest.approx(1 / 1.5)
    assert heavy.profile == "runs-heavy" and heavy.campaign == "heavy" and heavy.waiting_runs == 0
    light = campaign_plan(CAMPAIGNS["light"], 1.0, "c")
    assert light.points == (50, 100, 200) and light.ramp_s == 60.0 and light.mock.scenario == "light"
    hitl = campaign_plan(CAMPAIGNS["hitl"], 1.0, "c")
    assert hitl.answer_delay_s == 45.0 and hitl.profile == "runs-hitl" and hitl.points == (50, 100, 200)
    assert campaign_plan(CAMPAIGNS["hitl"], 1.0, "c", answer_delay_s=5.0).answer_delay_s == 5.0  # the seed's knob
    small = campaign_plan(CAMPAIGNS["heavy"], 0.02, "c")
    assert small.points == (1, 2, 4) and small.mock.tokens == 6 and small.mock.tps > 1


def test_runs_alive_at_once_over_a_ramp() -> None:
    def done(seconds: float | None) -> RunOutcome:
        return RunOutcome(duration_s=seconds) if seconds is not None else RunOutcome(failure="timeout")

    assert peak_concurrency(0.0, [done(1.0)] * 5) == 5  # all at once
    assert peak_concurrency(10.0, [done(1.0)] * 10) == 1  # each ends as the next starts
    assert peak_concurrency(10.0, [done(2.5)] * 10) == 3
    assert peak_concurrency(10.0, [done(None)] + [done(0.5)] * 9) == 2  # a run that never ended stays alive


def _row(runs: int, p95: float | None, completed: int | None = None, **failures: int) -> dict[str, Any]:
    return {
        "runs": runs,
        "duration_ms": {"p95": p95},
        "failures": failures,
        "completed": runs if completed is None else completed,
    }


def test_the_noise_rule_and_acceptance() -> None:
    steady = judge([[_row(25, 1000), _row(50, 1100)], [_row(25, 1050), _row(50, 1000)]])
    assert [p["noisy"] for p in steady["points"]] == [False, False] and steady["p95_holds"] == "holds"
    assert steady["start_errors"] == 0 and steady["completion"] == 1.0
    noisy = judge([[_row(25, 1000)], [_row(25, 1300)]])  # 30% apart
    assert noisy["points"][0]["noisy"] and noisy["points"][0]["spread"] == 0.3
    worse = judge([[_row(25, 1000), _row(50, 2000)], [_row(25, 1000), _row(50, 2100)]])
    assert worse["p95_holds"].startswith("degrades")
    failing = judge([[_row(10, 1000, completed=8, start_429=2)], [_row(10, 1000)]])
    assert failing["start_errors"] == 2 and failing["completion"] == 0.9
    unknown = judge([[_row(10, None)], [_row(10, 1000)]])  # too few samples for a p95: no conclusion
    assert unknown["points"][0]["noisy"]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_short_hitl_campaign_runs_twice_and_reports(tmp_path: Path) -> None:
    out = tmp_path / "out"
    # The human answers after 0.2 s, not the scaled 1.35 s: the wait is not what this checks (-21 s).
    assert main(["--campaign", "hitl", "--scale", "0.03", "--answer-delay-secs", "0.2", "--out-dir", str(out)]) == 0
    (json_path,) = out.glob("*-runs-hitl.json")
    report = json.loads(json_path.read_text())
    assert len(report["repeats"]) == 2 and report["judged"]["completion"] == 1.0
    first = report["repeats"][0][0]
    assert first["human"]["paused_share"] == 1.0  # every run met its human
    # each run: two commands approved by quoting their args_hash, then the question answered
    assert first["human"]["approvals"] == 2 * first["runs"] and first["human"]["answered"] == 3 * first["runs"]
    assert first["tool_results"] == 2 * first["runs"]  # the approved commands ran
    assert set(first["cpu_peak_cores"]) >= {"server", "sandboxes", "mock", "generator"}
    assert first["cpu_peak_total_cores"] > 0 and first["runs_per_core"] > 0
    markdown = json_path.with_suffix(".md").read_text()
    assert "## Campaign `hitl`" in markdown and "### CPU per service" in markdown


async def test_the_contract_check_walks_an_unpaced_twin_of_the_heavy_mock(tmp_path: Path) -> None:
    """The heavy campaign's mock answers 300 tokens at 1.5 s each: a contract walk against it
    outlived its own 30 s timeout (a traceback before any run). The twin keeps the scenario and
    the answers and drops the pacing, so the walk takes moments (a walk that finds the script
    broken is refused: tests/bench/test_mock_llm.py)."""
    import asyncio

    from agentos_bench.runs.bench import _check_contract

    heavy = campaign_plan(CAMPAIGNS["heavy"], 1.0, "test")
    assert heavy.mock.tokens == 300 and heavy.mock.tps < 1  # the pace that broke the walk
    async with asyncio.timeout(60):
        await _check_contract(heavy, tmp_path / "heavy")  # raises BenchSetupError on a broken script
    assert (tmp_path / "heavy" / "mock-llm.log").exists()  # it walked a twin of its own
