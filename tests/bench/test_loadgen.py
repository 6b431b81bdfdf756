"""A closed-loop point, end to end on loopback: rows, windows, counters, cleanup."""

from __future__ import annotations

from typing import Any

from agentos.mock.server import MockSettings, start_mock
from agentos_bench.common.http import bench_http_session
from agentos_bench.load.loadgen import Group, PointPlan, PointResult, Probes, _interleave, run_groups, run_point
from agentos_bench.load.targets import DirectTarget, ServerTarget

SHORT = {"warmup_s": 0.1, "duration_s": 0.5, "turn_timeout_s": 5.0}
TTFT_S = 0.020


async def test_direct_point_row() -> None:
    server = await start_mock(MockSettings(ttft_ms=TTFT_S * 1000, tps=500.0, tokens=3))
    base = server.url.removesuffix("/v1")
    try:
        async with bench_http_session() as http:
            # a warm-up long enough that its turns, if counted, would show in the rate
            # two seconds: a busy CI machine stalled a half-second window to no turn at all
            plan = PointPlan(concurrency=3, warmup_s=0.3, duration_s=2.0, turn_timeout_s=5.0)
            result = await run_point(DirectTarget(server.url), http, plan, Probes(mock_base_url=base))
    finally:
        await server.close()
    row = result.as_row()
    assert row["target"] == "direct" and row["concurrency"] == 3
    assert row["turns_ok"] > 3 and row["failures_total"] == 0
    # Little's law for a closed loop with no think time: throughput = workers / mean turn time. The
    # turn times come from the samples, not from the count the row divides, so a count that took in
    # warm-up turns or a rate over the wrong duration lands outside. Window edges cost <= 1 turn a worker.
    turn_s = [s.turn_s for s in result.samples if s.ok]
    littles_law = plan.concurrency / (sum(turn_s) / len(turn_s))
    assert 0.85 * littles_law <= row["turns_per_s"] <= 1.15 * littles_law, (row["turns_per_s"], littles_law)
    # No turn is faster than the mock's TTFT, so no worker ends more than window / TTFT + 1 turns in it.
    assert row["turns_per_s"] <= plan.concurrency * (plan.duration_s / TTFT_S + 1) / plan.duration_s
    assert TTFT_S * 1000 <= row["ttft_ms"]["p50"] <= row["turn_ms"]["p50"]
    assert row["mock_max_concurrent"] == 3
    assert row["loadgen_cpu_cores"] is not None


async def test_server_point_counts_failures_by_kind_and_cleans_up(stub: Any) -> None:
    stub.state.modes = ["ok", "500", "ok", "break"]
    async with bench_http_session() as http:
        plan = PointPlan(concurrency=2, **SHORT)
        result = await run_point(ServerTarget(stub.url), http, plan, Probes())
    row = result.as_row()
    assert row["turns_ok"] > 0
    assert set(row["failures"]) <= {"5xx", "stream_break"} and row["failures_total"] > 0
    assert stub.state.created == stub.state.deleted == 2
    assert "server_cpu_cores" not in row  # no pid given: nothing sampled, nothing invented


async def test_unreachable_server_counts_setup_failures() -> None:
    async with bench_http_session() as http:
        plan = PointPlan(concurrency=2, warmup_s=0.0, duration_s=0.1, turn_timeout_s=1.0)
        result = await run_point(ServerTarget("http://127.0.0.1:9"), http, plan, Probes())
    assert result.setup_failures == 2
    assert result.as_row()["turns_ok"] == 0


async def test_groups_share_one_window_and_each_tenant_gets_its_own_row_and_key(stub: Any) -> None:
    a = ServerTarget(stub.url, api_key="key-a", name="A")
    b = ServerTarget(stub.url, api_key="key-b", name="B")
    async with bench_http_session() as http:
        plan = PointPlan(concurrency=0, **SHORT)
        result_b, result_a = await run_groups([Group(b, 1), Group(a, 3)], http, plan, Probes())
    assert (result_b.target, result_b.concurrency, result_a.target, result_a.concurrency) == ("B", 1, "A", 3)
    assert result_b.as_row()["turns_ok"] > 0 and result_a.as_row()["turns_ok"] > result_b.as_row()["turns_ok"]
    auth = stub.state.auth
    assert (auth["create Bearer key-a"], auth["create Bearer key-b"], auth["create -"]) == (3, 1, 0)
    assert (auth["delete Bearer key-a"], auth["delete Bearer key-b"]) == (3, 1)
    assert auth["turn Bearer key-a"] + auth["turn Bearer key-b"] == stub.state.turns and auth["turn -"] == 0


def test_the_workers_of_groups_interleave_in_the_stagger() -> None:
    a, b = Group(ServerTarget("http://x", name="A"), 4), Group(ServerTarget("http://x", name="B"), 2)
    result = PointResult(target="-", concurrency=0, duration_s=1.0)
    live: list[tuple[Group, str | None, PointResult]] = [(a, f"a{i}", result) for i in range(4)]
    live += [(b, f"b{i}", result) for i in range(2)]
    assert [w for _, w, _ in _interleave(live)] == ["a0", "b0", "a1", "a2", "b1", "a3"]
