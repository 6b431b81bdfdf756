"""`agentos bench sweep --double-text enqueue`: each turn a pair, the second enqueued behind the
first in its session. One pair against the real server (the second really waits in the queue),
and a short real sweep whose rows count both turns of every pair."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentos.mock.server import MockSettings
from agentos_bench.common.http import bench_http_session
from agentos_bench.load.double_text import EnqueueTarget
from agentos_bench.load.sweep import run_sweep
from agentos_bench.load.sweep_plan import SweepPlan
from agentos_bench.report.document import sweep_markdown


async def test_the_second_message_waits_in_the_sessions_queue(server_factory: Any, mock_factory: Any) -> None:
    mock = await mock_factory(ttft_ms=100, tps=400, tokens=4)
    server = await server_factory(mock.url)
    target = EnqueueTarget(server.url)
    async with bench_http_session() as http:
        worker = await target.open_worker(http)
        first, second = await target.turn(http, worker, timeout_s=10)
        await target.close_worker(http, worker)
    assert first.ok and second.ok, (first, second)
    assert second.ended >= first.ended  # it ran after the first, in its slot
    assert server.runtime.kernel.statistics().queued_total == 1
    assert mock.stats.requests == 2


@pytest.mark.slow
async def test_a_short_double_text_sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # anywhere: the profiles are package data
    plan = SweepPlan(
        points=(2,),
        profiles=("no-store",),
        direct=True,
        duration_s=1.5,
        warmup_s=0.3,
        settle_s=0.1,
        mock=MockSettings(ttft_ms=50.0, tps=400.0, tokens=4),
        command="pytest",
        double_text="enqueue",
    )
    report = await run_sweep(plan)
    direct, server = report["rows"]
    assert direct["target"] == "direct" and server["target"] == "server"
    assert server["turns_ok"] > 0 and server["failures_total"] == 0
    assert report["double_text"] == "enqueue" and "on_busy: enqueue" in sweep_markdown(report, {})
