"""`agentos bench sweep --api openai`: the same sweep, each turn through /v1/chat/completions.

A short real run (the mock and the server as processes) and the verdicts of the chunk stream.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentos.mock.server import MockSettings
from agentos.providers.sse_parser import SSEEvent
from agentos_bench.load.openai_target import openai_verdict
from agentos_bench.load.sweep import run_sweep
from agentos_bench.load.sweep_plan import SweepPlan
from agentos_bench.report.document import sweep_markdown


@pytest.mark.slow
async def test_a_short_sweep_through_the_front_door(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # anywhere: the profiles are package data
    plan = SweepPlan(
        points=(2,),
        profiles=("no-store",),
        direct=False,
        duration_s=1.0,
        warmup_s=0.3,
        settle_s=0.1,
        mock=MockSettings(ttft_ms=20.0, tps=400.0, tokens=4),
        command="pytest",
        api="openai",
    )
    report = await run_sweep(plan)
    (row,) = report["rows"]
    assert row["target"] == "server" and row["turns_ok"] > 0 and row["failures_total"] == 0
    assert row["ttft_ms"]["p50"] >= 20
    assert report["api"] == "openai" and "/v1/chat/completions" in sweep_markdown(report, {})


@pytest.mark.parametrize(
    ("data", "seen_first", "verdict"),
    [
        ('{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}', False, None),
        ('{"choices":[{"index":0,"delta":{"content":"tok "}}]}', False, "first"),
        ('{"choices":[{"index":0,"delta":{"content":"tok "}}]}', True, None),
        ('{"choices":[],"usage":{"prompt_tokens":1}}', True, None),
        ('{"error":{"type":"conflict_error","code":"superseded"}}', True, "cancelled"),
        ('{"error":{"type":"server_error","code":"provider_timeout"}}', False, "turn_failed"),
        ("[DONE]", True, "ok"),
    ],
    ids=["role", "content", "later-content", "usage", "superseded", "failed", "done"],
)
def test_the_chunk_verdicts(data: str, seen_first: bool, verdict: str | None) -> None:
    assert openai_verdict(SSEEvent(event="message", data=data), seen_first) == verdict
