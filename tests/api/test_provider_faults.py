"""Provider errors, 429s and hangs end in a clean `turn.failed` with a reason, or are retried."""

from __future__ import annotations

import socket

import aiohttp

from agentos.mock.server import MockServer
from agentos.testing import Event, RunningServer
from tests.api.helpers import new_session, turn_events


async def run_one(server: RunningServer, http: aiohttp.ClientSession) -> list[Event]:
    sid = await new_session(http, server.url)
    return await turn_events(http, server.url, sid)


async def test_500s_are_retried_then_fail_the_turn(server_factory, mock_factory, http) -> None:
    mock: MockServer = await mock_factory(error_rate=1.0)
    server = await server_factory(mock.url, **{"provider.max_retries": 2})
    events = await run_one(server, http)
    assert [e.name for e in events] == ["turn.started", "turn.failed"]
    assert events[-1].data["reason"] == "provider_http_error"
    assert "500" in events[-1].data["message"]
    assert mock.stats.requests == 3  # the first try and two retries


async def test_a_429_is_retried_after_retry_after(server_factory, mock_factory, http) -> None:
    mock: MockServer = await mock_factory(fail_every=2, retry_after_s=0.05)
    server = await server_factory(mock.url)
    assert (await run_one(server, http))[-1].name == "turn.completed"  # request 1
    assert (await run_one(server, http))[-1].name == "turn.completed"  # request 2 is a 429, request 3 succeeds
    assert mock.stats.rate_limited == 1 and mock.stats.completed == 2


async def test_persistent_429s_fail_with_a_rate_limit_reason(server_factory, mock_factory, http) -> None:
    mock: MockServer = await mock_factory(fail_every=1, retry_after_s=0.01)
    server = await server_factory(mock.url, **{"provider.max_retries": 1})
    events = await run_one(server, http)
    assert events[-1].name == "turn.failed" and events[-1].data["reason"] == "provider_rate_limited"


async def test_a_retry_after_beyond_the_budget_is_not_waited_for(server_factory, mock_factory, http) -> None:
    mock: MockServer = await mock_factory(fail_every=1, retry_after_s=60)
    server = await server_factory(mock.url, **{"provider.retry_budget_s": 1.0})
    events = await run_one(server, http)
    assert events[-1].data["reason"] == "provider_rate_limited"
    assert mock.stats.requests == 1


async def test_a_hung_provider_fails_at_the_first_token_timeout(server_factory, mock_factory, http) -> None:
    mock: MockServer = await mock_factory(hang_rate=1.0)
    server = await server_factory(mock.url, **{"provider.first_token_timeout_s": 0.3})
    events = await run_one(server, http)
    assert events[-1].name == "turn.failed" and events[-1].data["reason"] == "provider_timeout"
    assert "first_token" in events[-1].data["message"]
    assert server.runtime.kernel.statistics().permits_in_use == 0


async def test_a_stalled_stream_fails_at_the_idle_timeout(server_factory, mock_factory, http) -> None:
    mock: MockServer = await mock_factory(ttft_ms=1, tps=2, tokens=5)  # half a second between tokens
    server = await server_factory(mock.url, **{"provider.idle_timeout_s": 0.2})
    events = await run_one(server, http)
    assert [e.name for e in events] == ["turn.started", "token", "turn.failed"]
    assert events[-1].data["reason"] == "provider_timeout" and "idle" in events[-1].data["message"]


async def test_an_unreachable_provider_fails_clearly(server_factory, http) -> None:
    with socket.socket() as s:  # a port that nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = await server_factory(f"http://127.0.0.1:{port}/v1", **{"provider.max_retries": 1})
    events = await run_one(server, http)
    assert events[-1].name == "turn.failed" and events[-1].data["reason"] == "provider_unavailable"


async def test_a_failed_turn_is_stored_as_failed(server_factory, mock_factory, http) -> None:
    mock: MockServer = await mock_factory(error_rate=1.0)
    server = await server_factory(mock.url, **{"provider.max_retries": 0})
    sid = await new_session(http, server.url)
    await turn_events(http, server.url, sid)
    async with http.get(f"{server.url}/v1/sessions/{sid}/messages") as r:
        messages = (await r.json())["data"]
    assert [(m["role"], m["status"]) for m in messages] == [("user", "completed"), ("assistant", "failed")]
