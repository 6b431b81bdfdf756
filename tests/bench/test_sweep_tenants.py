"""`agentos bench sweep --tenants N`, for real: the mock and the server as processes, N tenants
with a key each made through the admin API, the users spread round-robin over them, the report
written. Tiny windows: this checks the kit (each tenant's turns are its own), not the numbers."""

from __future__ import annotations

import shutil
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from agentos.mock.server import MockSettings
from agentos_bench.load.loadgen import PointResult
from agentos_bench.load.sweep import run_sweep
from agentos_bench.load.sweep_plan import SweepPlan
from agentos_bench.load.sweep_tenants import merge_results, tenant_spread, users_per_tenant
from agentos_bench.load.targets import TurnSample
from agentos_bench.report.document import write_report

TENANTS = ("bench-t001", "bench-t002", "bench-t003")


@pytest.mark.slow
async def test_a_sweep_over_three_tenants_runs_each_users_turns_as_its_tenant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    monkeypatch.chdir(tmp_path)  # anywhere: the profiles are package data
    plan = SweepPlan(
        points=(1, 4),
        profiles=("full-store-limits",),
        tenants=3,
        duration_s=1.5,
        warmup_s=0.5,
        settle_s=0.1,
        mock=MockSettings(ttft_ms=50.0, tps=400.0, tokens=4),
        command="pytest",
        keep_data=True,
    )
    report = await run_sweep(plan)
    request.addfinalizer(lambda: shutil.rmtree(report["kept_data"], ignore_errors=True))
    rows = {(r["target"], r["concurrency"]): r for r in report["rows"]}
    assert set(rows) == {("direct", 1), ("direct", 4), ("server", 1), ("server", 4)}
    for row in rows.values():  # the limits profile sets every limit, none of which may refuse
        assert row["turns_ok"] > 0 and row["failures_total"] == 0 and row["setup_failures"] == 0, row
    assert "tenancy" not in rows["direct", 4]
    assert rows["server", 1]["tenancy"]["tenants_with_users"] == 1
    spread = rows["server", 4]["tenancy"]
    assert (spread["tenants"], spread["tenants_with_users"]) == (3, 3)
    assert spread["users_per_tenant"] == {"min": 1.0, "median": 1.0, "max": 2.0}
    assert report["tenancy"]["tenants"] == 3

    access = _access_rows(Path(report["kept_data"]) / "data-full-store-limits" / "access.db")
    # A session's turns leave no access row once the session is deleted (docs/deployment.md,
    # "Retention": its rows name it); the DELETE's own row stays, made with the same key.
    turns = [(tenant, key) for tenant, key, method, path in access if method == "DELETE" and "/v1/sessions/" in path]
    assert {tenant for tenant, _ in turns} == set(TENANTS)  # none as the default tenant
    keys = {tenant: {key for t, key in turns if t == tenant} for tenant in TENANTS}
    assert all(len(k) == 1 for k in keys.values()) and len(set.union(*keys.values())) == 3
    created = Counter(tenant for tenant, _, method, path in access if (method, path) == ("POST", "/v1/sessions"))
    assert created == {"bench-t001": 1 + 2, "bench-t002": 1, "bench-t003": 1}  # c=1, then c=4 round-robin

    written = write_report(report, tmp_path, "sweep")
    text = written[1].read_text()
    assert "- **Tenancy:** 3 tenants, one API key each" in text
    assert "| full-store-limits | 4 | 3 of 3 | 1 / 2 |" in text


def _access_rows(path: Path) -> list[tuple[str, str, str, str]]:
    with sqlite3.connect(path) as conn:
        return list(conn.execute("SELECT tenant_id, key_id, method, path FROM access_log"))


def test_users_go_to_the_tenants_round_robin() -> None:
    assert users_per_tenant(1, 3) == [1, 0, 0]
    assert users_per_tenant(4, 3) == [2, 1, 1]
    assert users_per_tenant(1000, 100) == [10] * 100
    assert users_per_tenant(0, 2) == [0, 0]


def _result(name: str, users: int, ok: int, failed: int = 0) -> PointResult:
    samples = [TurnSample(0.0, 1.0, 0.5) for _ in range(ok)] + [TurnSample(0.0, 1.0, None, "5xx")] * failed
    return PointResult(target=name, concurrency=users, duration_s=2.0, samples=samples, server={"server_cpu_s": 1.0})


def test_the_merged_row_holds_every_tenants_turns_and_the_spread_shows_each() -> None:
    results = [_result("t001", 2, 40), _result("t002", 1, 10, failed=1), _result("t003", 1, 4)]
    row = merge_results(results, 4).as_row()
    assert (row["target"], row["concurrency"], row["turns_ok"], row["failures_total"]) == ("server", 4, 54, 1)
    assert row["turns_per_s"] == 27.0 and row["server_cpu_ms_per_turn"] == round(1000 / 54, 2)
    spread = tenant_spread(results, 5)
    assert (spread["tenants"], spread["tenants_with_users"]) == (5, 3)
    assert spread["turns_per_s"] == {"min": 2.0, "median": 5.0, "max": 20.0}
    assert spread["ttft_p95_tenants"] == 1  # t002 (10 turns) and t003 (4) have too few for a p95
    assert spread["ttft_p95_ms"]["min"] == spread["ttft_p95_ms"]["max"] == 500.0
