"""A closed-loop point, end to end on loopback: rows, windows, counters, cleanup."""

from __future__ import annotations

from typing import Any

from agentos.bench.loadgen import PointPlan, Probes, bench_http_session, run_point
from agentos.bench.mock_llm import MockSettings, start_mock
from agentos.bench.targets import DirectTarget, ServerTarget

SHORT = {"warmup_s": 0.1, "duration_s": 0.5, "turn_timeout_s": 5.0}


async def test_direct_point_row() -> None:
    server = await start_mock(MockSettings(ttft_ms=20.0, tps=500.0, tokens=3))
    base = server.url.removesuffix("/v1")
    try:
        async with bench_http_session() as http:
            plan = PointPlan(concurrency=3, **SHORT)
            result = await run_point(DirectTarget(server.url), http, plan, Probes(mock_base_url=base))
    finally:
        await server.close()
    row = result.as_row()
    assert row["target"] == "direct" and row["concurrency"] == 3
    assert row["turns_ok"] > 3 and row["failures_total"] == 0
    assert row["turns_per_s"] == round(row["turns_ok"] / 0.5, 2)
    assert 20 <= row["ttft_ms"]["p50"] <= row["turn_ms"]["p50"]
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
