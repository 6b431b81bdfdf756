"""`agentos bench sweep --nodes N`, the parts that need no database: placing sessions and turns on
nodes (against two real stub servers), the provider-limit fields, the report's table, and the
pre-flight refusal of a profile that cannot run on several nodes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from aiohttp.test_utils import TestServer
from tests.bench.conftest import Stub, StubState, create_stub_app

from agentos.cli import main
from agentos.config import load_settings, settings_from_dict
from agentos_bench.common.http import bench_http_session
from agentos_bench.load.cluster import Namespace, new_namespace, nodes_problem
from agentos_bench.load.loadgen import PointPlan, Probes, run_point
from agentos_bench.load.nodes import NodesTarget, RoundRobin, point_targets, provider_fields
from agentos_bench.load.targets import TurnSample
from agentos_bench.report.nodes_table import provider_limit_table

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = {
    "store": {"backend": "postgres", "postgres_url": "postgresql://u:secret@h:5432/d", "postgres_schema": "my_bench"},
    "coordination": {"redis_url": "redis://127.0.0.1:6379/0", "key_prefix": "ag:"},
}


@pytest.fixture
async def stubs() -> AsyncIterator[list[Stub]]:
    """Three stub servers: the nodes."""
    states = [StubState() for _ in range(3)]
    servers = [TestServer(create_stub_app(state), host="127.0.0.1") for state in states]
    for server in servers:
        await server.start_server()
    try:
        yield [Stub(url=str(s.make_url("")).rstrip("/"), state=state) for s, state in zip(servers, states, strict=True)]
    finally:
        for server in servers:
            await server.close()


async def test_sessions_go_round_robin_and_keep_their_node(stubs: list[Stub]) -> None:
    target = NodesTarget([s.url for s in stubs], RoundRobin(3))
    async with bench_http_session() as http:
        sessions = [await target.open_worker(http) for _ in range(7)]
        for session in sessions[:3]:
            for _ in range(2):
                assert (await target.turn(http, session, 5.0)).ok
        for session in sessions:
            await target.close_worker(http, session)
    assert [s.state.created for s in stubs] == [3, 2, 2]
    assert [s.state.turns for s in stubs] == [2, 2, 2]  # sessions 0, 1, 2 on nodes 0, 1, 2, twice each
    assert [s.state.deleted for s in stubs] == [3, 2, 2]


async def test_turn_spread_sends_consecutive_turns_to_the_next_node(stubs: list[Stub]) -> None:
    target = NodesTarget([s.url for s in stubs], RoundRobin(3), spread="turn")
    async with bench_http_session() as http:
        first, second = await target.open_worker(http), await target.open_worker(http)
        for _ in range(4):
            assert (await target.turn(http, second, 5.0)).ok  # created on node 1: turns on 1, 2, 0, 1
        assert target.turns_per_node == [1, 2, 1]
        assert (await target.turn(http, first, 5.0)).ok
    assert target.turns_per_node == [2, 2, 1] and [s.state.turns for s in stubs] == [2, 2, 1]


async def test_a_closed_loop_point_spreads_its_users_over_the_nodes(stubs: list[Stub]) -> None:
    (target,) = point_targets([s.url for s in stubs], "session")
    async with bench_http_session() as http:
        result = await run_point(target, http, PointPlan(concurrency=6, warmup_s=0.2, duration_s=0.5), Probes())
    assert result.as_row()["turns_ok"] > 0
    assert [s.state.created for s in stubs] == [2, 2, 2]
    assert all(s.state.turns > 0 for s in stubs)


async def test_tenants_share_one_placement_and_use_each_nodes_own_key(stubs: list[Stub]) -> None:
    keys = [["a0", "b0"], ["a1", "b1"], ["a2", "b2"]]  # keys[node][tenant]
    a, b = point_targets([s.url for s in stubs], "turn", keys)
    assert (a.name, b.name) == ("t001", "t002")
    async with bench_http_session() as http:
        a1, b1, a2 = await a.open_worker(http), await b.open_worker(http), await a.open_worker(http)
        for _ in range(2):
            sample = await b.turn(http, b1, 5.0)
            assert isinstance(sample, TurnSample) and sample.ok
    created = [dict(s.state.auth) for s in stubs]  # one placement: a1, b1, a2 on nodes 0, 1, 2
    assert created == [
        {"create Bearer a0": 1},
        {"create Bearer b1": 1, "turn Bearer b1": 1},
        {"create Bearer a2": 1, "turn Bearer b2": 1},
    ]
    assert a1 and a2
    (single,) = point_targets([stubs[0].url], "turn")
    assert not isinstance(single, NodesTarget)  # one node: the plain target, as before


def test_overshoot_is_the_peak_above_the_limit() -> None:
    assert provider_fields({"mock_max_concurrent": 1500}, 1000, 3, "turn")["provider_overshoot"] == 500
    assert provider_fields({"mock_max_concurrent": 999}, 1000, 3, "session")["provider_overshoot"] == 0
    one = provider_fields({"mock_max_concurrent": None}, 8, 1, "turn")
    assert one == {"nodes": 1, "spread": None, "provider_limit": 8, "provider_overshoot": None}


def test_the_report_says_what_an_overshoot_of_zero_shows() -> None:
    rows: list[dict[str, Any]] = [
        {"profile": "p", "concurrency": 1000, "mock_max_concurrent": 1000}
        | provider_fields({"mock_max_concurrent": 1000}, 1000, 3, "session"),
        {"profile": "p", "concurrency": 1500, "mock_max_concurrent": 1000}
        | provider_fields({"mock_max_concurrent": 1000}, 1000, 3, "session"),
        {"profile": "p", "concurrency": 1500, "mock_max_concurrent": 1500}
        | provider_fields({"mock_max_concurrent": 1500}, 1000, 3, "session"),
        {"profile": None, "concurrency": 4, "target": "direct"},  # no limit: not in the table
    ]
    table = provider_limit_table(rows)
    assert len(table) == 3 + 2 + 3
    assert table[-3].endswith("| 1000 | 1000 | 0 | c <= limit: cannot overshoot |")
    assert table[-2].endswith("| 1000 | 1000 | 0 | held |")
    assert table[-1].endswith("| 1000 | 1500 | 500 | over the limit |")


def test_only_the_postgres_store_with_redis_runs_on_several_nodes() -> None:
    assert nodes_problem(settings_from_dict({}), 1) is None
    assert "store.backend" in str(nodes_problem(settings_from_dict({}), 2))
    no_redis = settings_from_dict({"store": CLUSTER["store"]})
    assert "coordination.redis_url" in str(nodes_problem(no_redis, 3))
    assert nodes_problem(settings_from_dict(CLUSTER), 3) is None
    assert "1 or more" in str(nodes_problem(settings_from_dict(CLUSTER), 0))


def test_each_run_gets_its_own_schema_and_prefix() -> None:
    a, b = new_namespace(settings_from_dict(CLUSTER)), new_namespace(settings_from_dict(CLUSTER))
    assert a.schema != b.schema and a.key_prefix != b.key_prefix
    assert a.schema.startswith("my_bench_") and a.key_prefix.startswith("ag:bench:")
    assert a.pepper and a.pepper != b.pepper  # one pepper per run, the same on each of its nodes
    assert a.env(3) == {
        "AGENTOS_STORE_POSTGRES_SCHEMA": a.schema,
        "AGENTOS_SECURITY_KEY_PEPPER": a.pepper,
        "AGENTOS_COORDINATION_KEY_PREFIX": a.key_prefix,
        "AGENTOS_COORDINATION_EXPECTED_NODES": "3",
    }
    assert new_namespace(settings_from_dict({})) == Namespace()  # SQLite, no Redis: nothing to make
    assert Namespace().env(1) == {}


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["--profile", "full-store", "--nodes", "3"], "profile 'full-store' needs store.backend = \"postgres\""),
        (["--profile", "postgres", "--nodes", "2"], "profile 'postgres' needs coordination.redis_url"),
        (["--profile", "postgres-3node", "--nodes", "0"], "must be 1 or more"),
        (["--server-url", "http://127.0.0.1:9", "--nodes", "2"], "not with --server-url"),
    ],
)
def test_a_profile_that_cannot_run_on_n_nodes_is_refused_in_one_line(
    argv: list[str], problem: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # anywhere: the profiles are package data
    out = tmp_path / "out"
    assert main(["bench", "sweep", "--sweep", "1", "--duration-secs", "0.1", *argv, "--out-dir", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("agentos: bench sweep --nodes ") and problem in err and err.count("\n") == 1
    assert not out.exists()


def test_the_cluster_profile_has_the_baselines_kernel_and_both_services() -> None:
    settings = load_settings(ROOT / "src/agentos_bench/profiles/postgres-3node.toml")
    assert settings.kernel.max_in_flight_turns == 0 and settings.kernel.concurrency_limit == 2000  # as full-store
    assert settings.store.enabled and settings.store.backend == "postgres" and settings.coordination.redis_url
    assert nodes_problem(settings, 3) is None
    limited = load_settings(ROOT / "src/agentos_bench/profiles/postgres-3node-limited.toml")
    assert limited.kernel.concurrency_limit == 64 and nodes_problem(limited, 3) is None
    assert msgspec.structs.replace(limited.kernel, concurrency_limit=2000) == settings.kernel  # only the limit differs
    assert (limited.store, limited.coordination) == (settings.store, settings.coordination)
