"""One turn per target, classified: successes timed, failures named by kind."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from agentos.mock.server import MockSettings, start_mock
from agentos.providers.sse_parser import SSEEvent
from agentos_bench.common.http import bench_http_session
from agentos_bench.load.targets import (
    DirectTarget,
    ServerTarget,
    direct_verdict,
    retry_after,
    server_verdict,
    status_failure,
)


@pytest.mark.parametrize(
    ("mode", "failure"),
    [
        ("ok", None),
        ("429", "429"),
        ("500", "5xx"),
        ("break", "stream_break"),
        ("failed", "turn_failed"),
        ("cancelled", "cancelled"),
    ],
)
async def test_server_turn_outcomes(stub: Any, mode: str, failure: str | None) -> None:
    stub.state.modes = [mode]
    target = ServerTarget(stub.url)
    async with bench_http_session() as http:
        session_id = await target.open_worker(http)
        sample = await target.turn(http, session_id, timeout_s=5.0)
        await target.close_worker(http, session_id)
    assert sample.failure == failure
    assert (sample.ttft_s is not None) == (mode in ("ok", "break", "failed", "cancelled"))
    assert sample.turn_s >= (sample.ttft_s or 0.0)
    assert stub.state.created == stub.state.deleted == 1
    if mode == "429":
        assert sample.retry_after_s == 0.01


async def test_connection_refused_is_connect_failure() -> None:
    target = ServerTarget("http://127.0.0.1:9")
    async with bench_http_session() as http:
        sample = await target.turn(http, "s1", timeout_s=2.0)
    assert sample.failure == "connect"


async def test_direct_turn_times_first_token_and_timeout() -> None:
    server = await start_mock(MockSettings(ttft_ms=30.0, tps=1000.0, tokens=2))
    try:
        async with bench_http_session() as http:
            sample = await DirectTarget(server.url).turn(http, None, timeout_s=5.0)
            late = await DirectTarget(server.url).turn(http, None, timeout_s=0.01)
    finally:
        await server.close()
    assert sample.ok and sample.ttft_s is not None and sample.ttft_s >= 0.03
    assert late.failure == "timeout"


def test_verdicts() -> None:
    assert server_verdict(SSEEvent(event="token", data="{}")) == "first"
    assert server_verdict(SSEEvent(event="turn.completed", data="{}")) == "ok"
    assert server_verdict(SSEEvent(event="turn.started", data="{}")) is None
    assert direct_verdict(SSEEvent(event="message", data="[DONE]")) == "ok"
    assert direct_verdict(SSEEvent(event="message", data='{"choices":[{"delta":{"content":"x"}}]}')) == "first"
    assert direct_verdict(SSEEvent(event="message", data='{"choices":[{"delta":{}}]}')) is None


def test_status_and_retry_after_parsing() -> None:
    assert [status_failure(s) for s in (429, 500, 503, 404)] == ["429", "5xx", "5xx", "4xx"]
    assert retry_after("2") == 2.0
    assert retry_after("Wed, 21 Oct 2015 07:28:00 GMT") is None
    assert retry_after(None) is None


async def test_session_creation_gives_up_after_bounded_retries() -> None:
    async with aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.ClientError):
            await ServerTarget("http://127.0.0.1:9").open_worker(http)
