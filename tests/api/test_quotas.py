"""Quotas over a real server: sessions held (403 quota_sessions) and provider tokens per UTC
day (403 quota_tokens_per_day until midnight), both seeded from the store after a restart.
The quotas' calendar is a FakeClock on the epoch: the tests cross midnight without waiting."""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp

from agentos.mock.server import MockServer
from agentos.tenancy.quotas import DAY_S
from agentos.testing import FakeClock, RunningServer, start_server
from agentos.testing.tenants import create_tenant_key
from tests.api.helpers import SSE, expect_error, new_session
from tests.conftest import make_settings


@asynccontextmanager
async def served(data_dir: Path, provider_url: str, wall: FakeClock, **limits: int) -> AsyncIterator[RunningServer]:
    overrides = {f"tenant_limits.{name}": value for name, value in limits.items()}
    server = await start_server(make_settings(data_dir, provider_url, **overrides), wall_clock=wall)
    try:
        yield server
    finally:
        await server.close()


async def test_the_sessions_quota_holds_across_a_restart(
    tmp_path: Path, mock: MockServer, http: aiohttp.ClientSession
) -> None:
    wall = FakeClock(time.time())
    async with served(tmp_path, mock.url, wall, max_sessions=2) as server:
        first = await new_session(http, server.url)
        await new_session(http, server.url)
        async with http.post(f"{server.url}/v1/sessions", json={}) as r:
            await expect_error(r, 403, "quota_sessions")
            assert "Retry-After" not in r.headers  # it frees when the tenant deletes, not in time
        async with http.delete(f"{server.url}/v1/sessions/{first}") as r:
            assert r.status == 204
        async with http.delete(f"{server.url}/v1/sessions/{first}") as r:
            assert r.status == 404  # a second delete frees nothing
        await new_session(http, server.url)
    async with (
        served(tmp_path, mock.url, wall, max_sessions=2) as server,  # counted from the store
        http.post(f"{server.url}/v1/sessions", json={}) as r,
    ):
        await expect_error(r, 403, "quota_sessions")
    async with served(tmp_path, mock.url, wall, max_sessions=3) as server:
        await new_session(http, server.url)


async def test_a_bad_create_gives_its_session_back(tmp_path: Path, mock: MockServer, http) -> None:
    async with served(tmp_path, mock.url, FakeClock(time.time()), max_sessions=1) as server:
        for _ in range(3):
            async with http.post(f"{server.url}/v1/sessions", json={"agent": "nobody"}) as r:
                assert r.status == 404
        await new_session(http, server.url)


async def turn(http: aiohttp.ClientSession, url: str, session_id: str) -> aiohttp.ClientResponse:
    async with http.post(f"{url}/v1/sessions/{session_id}/turns", json={"input": "hi"}, headers=SSE) as r:
        await r.read()
        return r


async def test_tokens_per_day_refuses_until_midnight_utc_and_survives_a_restart(
    tmp_path: Path, mock_factory: Callable[..., Awaitable[MockServer]], http: aiohttp.ClientSession
) -> None:
    mock = await mock_factory(tokens=5)
    wall = FakeClock(time.time())
    to_midnight = math.ceil((wall.now() // DAY_S + 1) * DAY_S - wall.now())
    async with served(tmp_path, mock.url, wall, tokens_per_day=5) as server:
        sid = await new_session(http, server.url)
        assert (await turn(http, server.url, sid)).status == 200  # under the quota when it starts
        assert server.services.quotas.tokens_today("default") > 5  # prompt + completion
        refused = await turn(http, server.url, sid)
        assert refused.status == 403 and refused.headers["Retry-After"] == str(to_midnight)
        async with http.post(f"{server.url}/v1/sessions/{sid}/turns", json={"input": "hi"}) as r:
            await expect_error(r, 403, "quota_tokens_per_day")
        async with http.post(f"{server.url}/v1/agents", json={"name": "helper", "tools": []}) as r:
            assert r.status == 201
        async with http.post(f"{server.url}/v1/agents/helper/runs", json={"input": "go"}) as r:
            await expect_error(r, 403, "quota_tokens_per_day")  # runs spend the same tokens
        async with http.ws_connect(f"{server.url}/v1/sessions/{sid}/ws") as ws:
            await ws.send_json({"type": "turn", "input": "hi"})
            error = await ws.receive_json(timeout=10)
            assert error["error"]["code"] == "quota_tokens_per_day" and error["error"]["retry_after_s"] == to_midnight
    async with served(tmp_path, mock.url, wall, tokens_per_day=5) as server:  # today's usage, from the store
        assert (await turn(http, server.url, sid)).status == 403
        wall.advance(to_midnight)  # 00:00 UTC: a new day's quota
        assert (await turn(http, server.url, sid)).status == 200


async def test_a_runs_model_calls_count_against_the_day(tmp_path: Path, mock: MockServer, http) -> None:
    wall = FakeClock(time.time())
    async with served(tmp_path, mock.url, wall, tokens_per_day=5) as server:
        async with http.post(f"{server.url}/v1/agents", json={"name": "helper", "tools": []}) as r:
            assert r.status == 201
        async with http.post(f"{server.url}/v1/agents/helper/runs", json={"input": "go"}) as r:
            assert r.status == 202
            run_id = (await r.json())["run_id"]
        async with http.get(f"{server.url}/v1/runs/{run_id}/events") as r:
            assert "run.completed" in await r.text()  # the stream ends with the run
        assert server.services.quotas.tokens_today("default") >= 5
        async with http.post(f"{server.url}/v1/agents/helper/runs", json={"input": "go"}) as r:
            await expect_error(r, 403, "quota_tokens_per_day")
        sid = await new_session(http, server.url)
        assert (await turn(http, server.url, sid)).status == 403  # the same tokens as chat turns
    async with served(tmp_path, mock.url, wall, tokens_per_day=5) as server:  # seeded from the run journal
        assert server.services.quotas.tokens_today("default") >= 5
        async with http.post(f"{server.url}/v1/agents/helper/runs", json={"input": "go"}) as r:
            await expect_error(r, 403, "quota_tokens_per_day")


async def test_each_tenant_has_its_own_sessions_quota(server_factory, mock: MockServer, http) -> None:
    server = await server_factory(mock.url, **{"server.api_token": "admin"})
    a = await create_tenant_key(server.url, "admin", tenant_id="acme", limits={"max_sessions": 1})
    b = await create_tenant_key(server.url, "admin", tenant_id="umbrella", limits={"max_sessions": 1})
    for key in (a, b):
        async with http.post(f"{server.url}/v1/sessions", json={}, headers=key.headers) as r:
            assert r.status == 201
    async with http.post(f"{server.url}/v1/sessions", json={}, headers=a.headers) as r:
        await expect_error(r, 403, "quota_sessions")
    async with http.post(f"{server.url}/v1/sessions", json={}, headers={"Authorization": "Bearer admin"}) as r:
        assert r.status == 201  # the default tenant has no quota
