"""`agentos bench sweep --nodes 2`, for real: the mock, two `agentos serve` nodes sharing a fresh
PostgreSQL schema and Redis key prefix, the load generator, the report written; afterwards the
schema is gone and no key of the prefix is left. Tiny windows: this checks the kit, not the numbers.

Needs PostgreSQL (TEST_POSTGRES_URL) and Redis (TEST_REDIS_URL) on loopback; skipped without
them unless TEST_POSTGRES_REQUIRED=1 (CI), where their absence fails the test.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tests.postgres import REQUIRED, URL

from agentos.mock.server import MockSettings
from agentos_bench.load.cluster import local_service_pids, profile_settings
from agentos_bench.load.sweep import run_sweep
from agentos_bench.load.sweep_plan import SweepPlan
from agentos_bench.report.document import load_report, write_report

REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
pytestmark = pytest.mark.slow


async def _services_or_skip() -> None:
    """Skip (or, with TEST_POSTGRES_REQUIRED=1, fail) when PostgreSQL or Redis is not there."""
    asyncpg = pytest.importorskip("asyncpg", reason="asyncpg not installed (pip install -e '.[postgres]')")
    redis_asyncio = pytest.importorskip("redis.asyncio", reason="redis not installed (pip install -e '.[redis]')")
    try:
        conn = await asyncpg.connect(URL, timeout=5)
        await conn.close()
        redis = redis_asyncio.Redis.from_url(REDIS_URL, socket_timeout=5)
        try:
            await redis.ping()
        finally:
            await redis.aclose()
    except (OSError, asyncpg.PostgresError, redis_asyncio.RedisError) as exc:
        if REQUIRED:
            raise
        pytest.skip(f"PostgreSQL at {URL} or Redis at {REDIS_URL} not reachable ({exc})")


def _profile(path: Path) -> Path:
    """The postgres-3node profile's settings, pointed at the test services."""
    path.write_text(
        "[kernel]\nmax_in_flight_turns = 0\nconcurrency_limit = 3\n"
        f'[store]\nbackend = "postgres"\npostgres_url = "{URL}"\npostgres_schema = "t_bench"\npostgres_pool_max = 4\n'
        f'[coordination]\nredis_url = "{REDIS_URL}"\nkey_prefix = "agentos:test:"\n'
    )
    return path


async def _leftovers() -> tuple[list[str], list[bytes]]:
    """Schemas and Redis keys a bench run of this test could have left behind."""
    import asyncpg
    from redis.asyncio import Redis

    conn = await asyncpg.connect(URL, timeout=5)
    try:
        rows = await conn.fetch("SELECT nspname FROM pg_namespace WHERE nspname LIKE 't\\_bench\\_%'")
    finally:
        await conn.close()
    redis = Redis.from_url(REDIS_URL, socket_timeout=5)
    try:
        keys = [key async for key in redis.scan_iter(match="agentos:test:bench:*", count=1000)]
    finally:
        await redis.aclose()
    return [r["nspname"] for r in rows], keys


async def test_a_sweep_over_two_nodes_on_postgres_and_redis(tmp_path: Path) -> None:
    await _services_or_skip()
    schemas_before, keys_before = await _leftovers()  # another run of this test may be under way
    profile = _profile(tmp_path / "cluster.toml")
    services = local_service_pids(profile_settings(profile))
    plan = SweepPlan(
        points=(2, 6),
        profiles=(str(profile),),
        nodes=2,
        spread="turn",
        duration_s=2.0,
        warmup_s=0.5,
        settle_s=0.1,
        mock=MockSettings(ttft_ms=50.0, tps=400.0, tokens=4),
        command="pytest",
    )
    report = await run_sweep(plan)
    assert report["notes"] == []  # both nodes stopped cleanly, schema and keys removed
    rows = {(r["target"], r["concurrency"]): r for r in report["rows"]}
    assert set(rows) == {("direct", 2), ("direct", 6), ("server", 2), ("server", 6)}
    for concurrency in (2, 6):
        row = rows["server", concurrency]
        assert row["turns_ok"] > 0 and row["failures_total"] == 0 and row["setup_failures"] == 0, row
        assert (row["nodes"], row["spread"], row["provider_limit"]) == (2, "turn", 3)
        assert isinstance(row["provider_overshoot"], int) and row["provider_overshoot"] >= 0
        assert row["provider_overshoot"] == max(0, row["mock_max_concurrent"] - 3)
        assert row["server_cpu_ms_per_turn"] > 0 and row["server_processes"] >= 2  # both nodes' trees
        if services:  # PostgreSQL and Redis on this machine (not in a container): their CPU too
            assert row["services_cpu_ms_per_turn"] > 0
        else:
            assert row["services_cpu_ms_per_turn"] is None
    assert rows["server", 2]["provider_overshoot"] == 0  # 2 streams cannot exceed 3
    assert report["cluster"]["nodes"] == 2 and "2 server nodes" in report["topology"]

    write_report(report, tmp_path, "sweep")
    assert load_report(tmp_path / "sweep.json")["rows"][-1]["provider_limit"] == 3
    markdown = (tmp_path / "sweep.md").read_text()
    assert (
        "- **Nodes:** 2 server nodes per profile" in markdown
        and "### Nodes, shared services and the provider limit" in markdown
    )
    assert "2 nodes" in markdown  # the server section's title

    schemas_after, keys_after = await _leftovers()
    assert set(schemas_after) <= set(schemas_before) and set(keys_after) <= set(keys_before)


async def test_a_sweep_of_one_server_with_two_workers_pinned(tmp_path: Path) -> None:
    await _services_or_skip()
    cpu = str(min(os.sched_getaffinity(0)))
    plan = SweepPlan(
        points=(4,),
        profiles=(str(_profile(tmp_path / "workers.toml")),),
        workers=2,
        server_cpus=cpu,
        mock_cpus=cpu,
        direct=False,
        duration_s=2.0,
        warmup_s=0.5,
        settle_s=0.1,
        mock=MockSettings(ttft_ms=50.0, tps=400.0, tokens=4),
        command="pytest",
    )
    report = await run_sweep(plan)
    assert report["notes"] == []  # the supervisor drained its workers and exited 0
    (row,) = report["rows"]
    assert row["turns_ok"] > 0 and row["failures_total"] == 0, row
    assert row["server_processes"] >= 3  # the supervisor and its two workers, CPU summed
    assert report["cluster"]["workers"] == 2 and "--workers 2" in report["cluster"]["text"]
    assert "each `agentos serve --workers 2`" in report["topology"]
    assert f"server on CPUs {cpu}, mock on {cpu}, load generator on any" in report["topology"]
