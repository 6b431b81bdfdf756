"""`agentos bench faults`: its verdict rules, the duplicate and integrity checks on real files,
and a short real campaign (kill -9 of a real server, provider faults, overload)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from agentos_bench.faults.bench import verdict
from agentos_bench.faults.cli import main
from agentos_bench.faults.storm import _integrity, _repeated_lines


def _storm(**changes: Any) -> dict[str, Any]:
    return {
        "lost_turns": 0,
        "duplicated_turns": 0,
        "lost_steps": 0,
        "duplicated_effects": 0,
        "integrity": {"sessions.db": "ok"},
    } | changes


def _overload(**changes: Any) -> dict[str, Any]:
    return {
        "refusal_ms": {"p99": 2.0},
        "goodput_share": 0.95,
        "accepted": 10,
        "completed": 10,
        "recovery_s": 1.0,
    } | changes


def test_the_verdict_meets_a_target_only_on_its_number() -> None:
    good = verdict(
        {
            "storm": _storm(),
            "overload": _overload(),
            "provider": {"streams": 5, "streams_with_one_terminal_event": 5, "responses_5xx": 0},
        }
    )
    assert all(v["met"] for v in good.values()) and len(good) == 8
    bad = verdict(
        {
            "storm": _storm(lost_turns=1, integrity={"runs.db": "row 3 missing"}),
            "overload": _overload(refusal_ms={"p99": None}, goodput_share=0.5, completed=9, recovery_s=None),
            "provider": {"streams": 5, "streams_with_one_terminal_event": 4, "responses_5xx": 1},
        }
    )
    assert not any(v["met"] for v in bad.values())  # a p99 with too few samples is not "met"
    nothing = verdict({"provider": {"streams": 0, "streams_with_one_terminal_event": 0, "responses_5xx": 0}})
    assert not nothing["every stream ends with exactly one terminal event"]["met"]  # no stream: nothing shown


def test_repeated_effects_and_integrity_are_read_from_the_files(tmp_path: Path) -> None:
    log = tmp_path / "effects.log"
    log.write_text("step-1\nstep-2\nstep-1\nstep-1\n")
    assert _repeated_lines(log) == 2
    sqlite3.connect(tmp_path / "a.db").execute("CREATE TABLE t (x)").connection.close()
    assert _integrity(tmp_path) == {"a.db": "ok"}


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_short_campaign_loses_nothing_and_writes_its_report(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(["--scale", "0.05", "--kills", "1", "--out-dir", str(out), "--keep-dir", str(tmp_path / "run")]) == 0
    (json_path,) = out.glob("*-faults.json")
    report = json.loads(json_path.read_text())
    storm, provider, over = report["storm"], report["provider"], report["overload"]
    assert storm["kills"] == 1 and storm["acknowledged_turns"] > 0 and storm["time_to_ready_ms"]["n"] == 1
    assert storm["lost_turns"] == storm["duplicated_turns"] == storm["lost_steps"] == storm["duplicated_effects"] == 0
    assert set(storm["integrity"].values()) == {"ok"}
    assert provider["streams"] > 0 and provider["responses_5xx"] == 0
    assert provider["streams_with_one_terminal_event"] == provider["streams"]
    assert over["refused_429"] > 0 and over["accepted"] == over["completed"]
    assert over["refusals_timed"] > 0 and over["healthz_floor_ms"]["n"] > 0  # the overload bench's prober
    assert "## Verdict" in json_path.with_suffix(".md").read_text()
