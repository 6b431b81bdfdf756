"""`agentos bench faults --cluster`: its read-back checks on crafted transcripts and journals (each
able to fail), its verdict rules, and the whole campaign at toy size against its own real
PostgreSQL and Redis (three real nodes, the five faults)."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from agentos_bench.chaos.clients import Run, Turn
from agentos_bench.chaos.services import services_problem
from agentos_bench.chaos.verdicts import fault_verdicts, provider_bound
from agentos_bench.chaos.verify import _check_run, _check_session
from agentos_bench.faults.cli import main


def _turns() -> list[Turn]:
    return [Turn("s", k, f"user 0 turn {k}", "kill", 0, "completed", f"turn_{k}") for k in (1, 2, 3)]


def _message(turn: int, role: str) -> dict[str, Any]:
    content = f"user 0 turn {turn}" if role == "user" else "tok tok"
    return {"turn_id": f"turn_{turn}", "role": role, "content": content, "status": "completed"}


def _session(order: list[tuple[int, str]]) -> dict[str, Counter[str]]:
    found: dict[str, Counter[str]] = defaultdict(Counter)
    _check_session(_turns(), [_message(t, role) for t, role in order], found)
    return found


def test_a_transcript_in_order_with_one_answer_each_passes() -> None:
    found = _session([(1, "user"), (1, "assistant"), (2, "user"), (2, "assistant"), (3, "user"), (3, "assistant")])
    assert sum(found["lost_turns"].values()) == sum(found["duplicated_turns"].values()) == 0
    assert sum(found["stale_writes"].values()) == 0


def test_a_lost_a_duplicated_answer_and_a_late_write_of_an_earlier_turn_are_found() -> None:
    found = _session([(1, "user"), (2, "user"), (2, "assistant"), (1, "assistant"), (2, "assistant"), (3, "user")])
    assert found["lost_turns"]["kill"] == 1  # turn 3 acknowledged, no answer stored
    assert found["duplicated_turns"]["kill"] == 1  # turn 2 answered twice
    assert found["stale_writes"]["kill"] == 1  # turn 1's answer written after turn 2 began


def test_a_repeated_step_a_lost_step_and_an_unfinished_run_are_found() -> None:
    found: dict[str, Counter[str]] = defaultdict(Counter)
    run = Run("run_1", "warm-up", 0, acknowledged={3: "tool.result", 9: "tool.result"}, open_in={"warm-up", "kill"})
    journal = [(3, "tool.result", {"call_id": "c1"}), (5, "tool.result", {"call_id": "c1"})]
    _check_run(run, journal, "waiting_human", ["step-1", "step-1"], found)
    for phase in ("warm-up", "kill"):  # a run open across the fault is the fault's too
        assert found["repeated_steps"][phase] == found["repeated_effects"][phase] == found["lost_steps"][phase] == 1
        assert found["unfinished_runs"][phase] == 1


def test_the_provider_bound_and_a_verdict_that_fails() -> None:
    assert provider_bound("kill", 300, 3) == 0 and provider_bound("node-cut", 300, 3) == 100
    assert provider_bound("redis-stop", 10, 3) == 2  # three shares of ceil(10 / 3)
    assert provider_bound("redis-stop", 300, 3, [112, 98, None]) == 12  # node 0 kept 12 above its share
    assert provider_bound("kill", 300, 3, alone=True) == 100  # a node's Redis call timed out: it decided alone
    clients = {"turns_completed": 5, "runs": 1, "responses_503": 2, "responses_503_with_retry_after": 1}
    verdicts = fault_verdicts({"kill": {"clients": clients, "provider_peak_streams": 11}}, 10, 3)["kill"]
    assert not verdicts["provider peak <= limit + 0"]["met"]
    assert not verdicts["clear errors (503 + Retry-After, store_unavailable), no hangs"]["met"]
    assert verdicts["acknowledged turns: 0 lost, 0 duplicated"]["met"]


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.skipif(services_problem() is not None, reason=f"{services_problem()}")
def test_the_campaign_at_toy_size_judges_every_fault(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(["--cluster", "--scale", "0.05", "--out-dir", str(out), "--keep-dir", str(tmp_path / "run")]) == 0
    (json_path,) = out.glob("*-faults-cluster.json")
    report = json.loads(json_path.read_text())
    assert list(report["faults"]) == ["kill", "postgres-restart", "redis-stop", "node-cut", "clock-step"]
    for fault, verdicts in report["verdict"].items():
        missed = {t: v["value"] for t, v in verdicts.items() if not v["met"] and not t.startswith("provider peak")}
        assert not missed, (fault, missed)  # the provider's peak: reported (see docs/deployment.md, known limits)
    pg = report["faults"]["postgres-restart"]
    assert pg["clients"]["responses_503"] + pg["clients"]["turn_outcomes"].get("failed:store_unavailable", 0) > 0
    assert (out / json_path.name.replace(".json", ".md")).read_text().count("| verdict | met | value |") == 5
