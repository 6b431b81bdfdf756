"""`agentos bench load --scale 0.02`: the whole run against a real server and mock (processes of
their own, loopback), every load sent and answered, the fixture removed, the report written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentos_bench.arrival.cli import main

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def test_a_short_run_sends_every_load_and_writes_its_report(tmp_path: Path) -> None:
    assert main(["--scale", "0.02", "--out-dir", str(tmp_path / "out"), "--keep-dir", str(tmp_path / "run")]) == 0
    (json_path,) = (tmp_path / "out").glob("*-load.json")
    report = json.loads(json_path.read_text())
    ran = report["what_ran"]
    assert report["usable"] and ran["offered"] == ran["recorded"] > 80
    assert all(c["recorded"] > 0 for c in ran["by_load"].values())  # every load was sent
    everything = [load for phase in report["phases"].values() for load in phase["loads"].values()]
    assert sum(load["failed"] for load in everything) == 0, [load["failures"] for load in everything]
    assert report["fixture_cleanup_failures"] == []
    assert set(report["verdict"]) == set(ran["by_load"])
    markdown = json_path.with_suffix(".md").read_text()
    assert "## Verdict" in markdown and "`trigger_fire`" in markdown
    assert "aos_" not in json_path.read_text() + markdown  # no key is written anywhere
