"""`agentos bench load --server-url`: measuring a deployment the bench did not start.

The pure parts (URLs, /metrics parsing, the redacted command, the per-phase figures, the
recovery verdict) on their own; then the whole run at toy size against two real `agentos serve`
nodes sharing PostgreSQL and Redis, with a real mock, the database observed through
`--database-url`. Needs PostgreSQL and Redis on loopback (as tests/bench/test_sweep_nodes.py).
"""

from __future__ import annotations

import asyncio
import json
import secrets
from pathlib import Path

import pytest
from tests.bench.test_sweep_nodes import REDIS_URL, _services_or_skip
from tests.postgres import URL

from agentos.mock.server import MockSettings
from agentos_bench.arrival.cli import main, redacted
from agentos_bench.arrival.dispatch import Sample
from agentos_bench.arrival.schedule import PhaseWindow
from agentos_bench.arrival.summary import recovery
from agentos_bench.common.deployment import DeploymentError, DeploymentSamples, node_figures, parse_urls
from agentos_bench.common.mock_process import start_mock_process
from agentos_bench.common.processes import ServerPlan, stop_child
from agentos_bench.load.cluster import profile_settings, start_nodes

METRICS = """\
# TYPE process_cpu_seconds counter
process_cpu_seconds_total 12.5
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 104857600.0
# TYPE agentos_store_pool_waiting gauge
agentos_store_pool_waiting 3.0
# TYPE agentos_store_pool_acquire_timeouts counter
agentos_store_pool_acquire_timeouts_total 7.0
# TYPE agentos_turn_duration_ms histogram
agentos_turn_duration_ms_bucket{le="+Inf",outcome="completed"} 4.0
"""


def test_urls_are_checked() -> None:
    assert parse_urls("http://127.0.0.1:8000, http://127.0.0.1:8001/") == (
        "http://127.0.0.1:8000",
        "http://127.0.0.1:8001",
    )
    for bad in ("", "ftp://h:1", "http://h:1/v1", "http://h:1,http://h:1", "127.0.0.1:8000"):
        with pytest.raises(DeploymentError):
            parse_urls(bad)


def test_a_nodes_figures_come_from_its_metrics() -> None:
    figures = node_figures(METRICS)
    assert figures == {"cpu_s": 12.5, "rss_bytes": 104857600.0, "pool_waiting": 3.0, "pool_timeouts": 7.0}


def test_the_recorded_command_hides_a_database_password() -> None:
    line = "agentos bench load --server-url http://h:1 --database-url postgresql://app:s3cret@db:5432/agentos"
    assert redacted(line) == line.replace("s3cret", "***")
    assert "s3cret" not in redacted(line)


def test_figures_per_phase_take_peaks_and_the_timeouts_within_it() -> None:
    samples = DeploymentSamples(("node 1",))
    rows: list[dict[str, float]] = [
        {"rss_bytes": 2**20 * r, "pool_timeouts": t, "pool_waiting": w}
        for r, t, w in [(10, 0, 0), (30, 4, 9), (20, 6, 1)]
    ]
    for t, row in enumerate(rows):
        samples.times_s.append(float(t))
        samples.figures["node 1"].append(row)
        samples.database.append({"connections": 5 + t, "active": t})
    samples.times_s.append(3.0)
    samples.figures["node 1"].append(None)  # a failed scrape
    samples.database.append(None)
    (phase,) = samples.by_phase([PhaseWindow("burst", 0.0, 3.0, 36.0, 100)]).values()
    node = phase["nodes"]["node 1"]
    assert (node["peak_rss_mb"], node["peak_pool_waiting"], node["pool_timeouts"]) == (30.0, 9, 6)
    assert (node["scrapes"], node["scrape_failures"]) == (3, 1)
    assert phase["database_peak"] == {"connections": 7, "active": 2}


def _sample(i: int, phase: str, due_s: float, ok: bool) -> Sample:
    return Sample(i, "api_read", phase, due_s, due_s, due_s + 0.01, error=None if ok else "http_503")


WINDOWS = [
    PhaseWindow("sustain", 0, 30, 12, 0),
    PhaseWindow("burst", 30, 40, 36, 0),
    PhaseWindow("recover", 40, 70, 12, 0),
]


def test_recovery_reads_the_last_third_of_the_recover_phase() -> None:
    sustain = [_sample(i, "sustain", i * 0.1, True) for i in range(300)]
    burst = [_sample(i, "burst", 30 + i * 0.03, i % 2 == 0) for i in range(300)]
    # failing through the first two thirds of recover, clean in the last: recovered
    recover = [_sample(i, "recover", 40 + i * 0.1, 40 + i * 0.1 >= 60) for i in range(300)]
    found = recovery(WINDOWS, sustain + burst + recover)
    assert found is not None and found["recovered"] is True
    assert found["peak_phase"] == "burst" and found["peak_error_rate"] == 0.5
    assert [t["error_rate"] for t in found["recover_thirds"]] == [1.0, 1.0, 0.0]
    # still failing a third of its requests at the end: did not recover (the seed's default pool)
    stuck = [_sample(i, "recover", 40 + i * 0.1, i % 3 != 0) for i in range(300)]
    never = recovery(WINDOWS, sustain + burst + stuck)
    assert never is not None and never["recovered"] is False


def test_a_deployment_needs_its_admin_key_in_the_named_variable(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--server-url", "http://127.0.0.1:9", "--admin-token-env", "AGENTOS_TEST_NO_SUCH_VARIABLE"]
    assert main([*args, "--scale", "0.01"]) == 2
    assert "needs an admin key in $AGENTOS_TEST_NO_SUCH_VARIABLE" in capsys.readouterr().err
    assert main(["--database-url", "postgresql://h/d", "--scale", "0.01"]) == 2


@pytest.mark.slow
@pytest.mark.timeout(240)
async def test_a_two_node_deployment_is_measured_from_outside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    await _services_or_skip()
    token = secrets.token_urlsafe(24)
    monkeypatch.setenv("AGENTOS_TEST_BENCH_ADMIN", token)
    profile = tmp_path / "cluster.toml"
    profile.write_text(
        f'[store]\nbackend = "postgres"\npostgres_url = "{URL}"\npostgres_schema = "t_load"\n'
        f'[coordination]\nredis_url = "{REDIS_URL}"\nkey_prefix = "agentos:test:"\n'
    )
    mock = await start_mock_process(MockSettings(ttft_ms=50, tps=400, tokens=8, scenario="tools"), tmp_path)
    notes: list[str] = []
    try:
        plan = ServerPlan(
            profile_path=profile, provider_url=mock.url, data_dir=tmp_path / "data", env={"AGENTOS_API_TOKEN": token}
        )
        async with start_nodes(plan, 2, profile_settings(profile), tmp_path, notes) as nodes:
            urls = ",".join(child.url for child in nodes.children)
            argv = [
                "--server-url",
                urls,
                "--admin-token-env",
                "AGENTOS_TEST_BENCH_ADMIN",
                "--database-url",
                URL,
                "--mock-url",
                mock.url,
                "--scale",
                "0.02",
                "--out-dir",
                str(tmp_path / "out"),
            ]
            assert await asyncio.to_thread(main, argv) == 0
    finally:
        await stop_child(mock.process)
    (json_path,) = (tmp_path / "out").glob("*-load.json")
    report = json.loads(json_path.read_text())
    ran = report["what_ran"]
    assert report["usable"] and ran["offered"] == ran["recorded"] > 80
    everything = [load for phase in report["phases"].values() for load in phase["loads"].values()]
    assert sum(load["failed"] for load in everything) == 0, [load["failures"] for load in everything]
    assert report["fixture_cleanup_failures"] == [] and report["mock"] is None
    assert set(report["cpu"]["peak_cores"]) == {"node 1", "node 2", "generator"}
    assert all(report["cpu"]["peak_cores"][node] > 0 for node in ("node 1", "node 2"))  # both took load
    sustain = report["deployment"]["by_phase"]["sustain"]
    for node in ("node 1", "node 2"):
        figures = sustain["nodes"][node]
        assert figures["scrapes"] >= 2 and figures["peak_rss_mb"] > 10 and figures["peak_pool_in_use"] is not None
    assert sustain["database_peak"]["connections"] >= 2 and sustain["database_peak"]["max_connections"] >= 10
    assert report["recovery"]["recovered"] is True
    markdown = json_path.with_suffix(".md").read_text()
    assert "## The deployment's figures" in markdown and "## After the burst" in markdown
    assert token not in json_path.read_text() + markdown


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_runs_against_a_running_node_approve_by_args_hash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`agentos bench runs --server-url`: the node's own agent (approval-gated commands), its CPU
    and memory from /metrics."""
    from agentos_bench.common.processes import resolve_profile, start_server_process
    from agentos_bench.runs.cli import main as runs_main

    token = secrets.token_urlsafe(24)
    monkeypatch.setenv("AGENTOS_TEST_BENCH_ADMIN", token)
    mock = await start_mock_process(MockSettings(ttft_ms=20, tps=1000, tokens=4, scenario="tools"), tmp_path)
    try:
        plan = ServerPlan(
            profile_path=resolve_profile("runs-hitl"),
            provider_url=mock.url,
            data_dir=tmp_path / "data",
            env={"AGENTOS_API_TOKEN": token},
        )
        server = await start_server_process(plan, tmp_path)
        try:
            argv = [
                "--server-url",
                server.url,
                "--admin-token-env",
                "AGENTOS_TEST_BENCH_ADMIN",
                "--runs",
                "4",
                "--answer-delay-secs",
                "0.05",
                "--ramp-secs",
                "0.2",
                "--out-dir",
                f"{tmp_path}/out",
            ]
            assert await asyncio.to_thread(runs_main, argv) == 0
        finally:
            await stop_child(server.process)
    finally:
        await stop_child(mock.process)
    (json_path,) = (tmp_path / "out").glob("*-runs-deployment.json")
    (point,) = json.loads(json_path.read_text())["points"]
    assert point["completed"] == 4 and point["failures"] == {}
    assert point["human"]["approvals"] == 8 and point["human"]["answered"] == 12  # 2 approvals + 1 question a run
    assert point["cpu_peak_cores"]["node 1"] > 0 and point["runs_per_core"] > 0
    assert point["peak_rss_mb"]["node 1"] > 10
    assert token not in json_path.read_text() + json_path.with_suffix(".md").read_text()
