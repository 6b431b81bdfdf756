"""Per-tenant caps over real HTTP: the real server, the real mock, real SQLite. Every tenant's
defaults (`[tenant_limits]`) apply to the default tenant too."""

from __future__ import annotations

from pathlib import Path

import aiohttp

from agentos.config import settings_from_dict
from agentos.kernel import TenantShare
from agentos.mock.server import MockServer
from agentos.testing import RunningServer, sse_events, start_server
from agentos.testing.tenants import create_tenant_key
from tests.api.helpers import SSE, new_session

ADMIN = "admin-token-for-tests"


async def test_over_the_tenants_concurrent_turns_a_turn_gets_429_with_the_tenants_code(
    tmp_path: Path, mock_factory, http: aiohttp.ClientSession
) -> None:
    mock: MockServer = await mock_factory(ttft_ms=5, tps=50, tokens=30)
    settings = settings_from_dict(
        {"data_dir": str(tmp_path), "provider": {"url": mock.url}, "tenant_limits": {"max_concurrent_turns": 1}}
    )
    server: RunningServer = await start_server(settings)
    try:
        busy, other = await new_session(http, server.url), await new_session(http, server.url)
        events = []
        async with http.post(f"{server.url}/v1/sessions/{busy}/turns", json={"input": "x"}, headers=SSE) as r:
            async for event in sse_events(r):
                events.append(event)
                if event.name == "token" and len(events) == 2:
                    async with http.post(f"{server.url}/v1/sessions/{other}/turns", json={"input": "y"}) as rej:
                        assert rej.status == 429
                        assert rej.headers["Retry-After"] == "1"
                        assert (await rej.json())["error"]["code"] == "tenant_concurrent_turns"
        assert events[-1].name == "turn.completed"
        async with http.post(f"{server.url}/v1/sessions/{other}/turns", json={"input": "y"}) as again:
            assert again.status == 200  # the slot came back with the first turn's end
    finally:
        await server.close()


async def test_over_the_tenants_active_runs_a_run_gets_429_with_the_tenants_code(
    tmp_path: Path, mock_factory, http: aiohttp.ClientSession
) -> None:
    mock: MockServer = await mock_factory(ttft_ms=2000, tps=200, tokens=2)
    settings = settings_from_dict(
        {
            "data_dir": str(tmp_path),
            "provider": {"url": mock.url},
            "agents": {"slow": {"tools": []}},
            "tenant_limits": {"max_active_runs": 1},
        }
    )
    server: RunningServer = await start_server(settings)
    try:
        url = f"{server.url}/v1/agents/slow/runs"
        async with http.post(url, json={"input": "one"}) as first:
            assert first.status == 202
        async with http.post(url, json={"input": "two"}) as rej:
            assert rej.status == 429
            assert rej.headers["Retry-After"] == "1"
            assert (await rej.json())["error"]["code"] == "tenant_active_runs"
    finally:
        await server.close()


async def test_a_tenants_weight_and_caps_reach_the_kernel_from_the_admin_api(server_factory, mock: MockServer) -> None:
    server: RunningServer = await server_factory(mock.url, **{"server.api_token": ADMIN})
    kernel = server.services.driver.kernel
    assert not kernel.statistics().shared  # only "default" so far
    await create_tenant_key(server.url, ADMIN, tenant_id="acme", limits={"weight": 3, "max_concurrent_turns": 2})
    assert kernel.tenant_share("acme") == TenantShare(weight=3, max_concurrent_turns=2, max_active_runs=0)
    assert kernel.statistics().shared  # two tenants: the reserve applies
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {ADMIN}"}) as admin:
        patch = {"limits": {"weight": None, "max_active_runs": 5}}
        async with admin.patch(f"{server.url}/v1/admin/tenants/acme", json=patch) as r:
            assert r.status == 200
    assert kernel.tenant_share("acme") == TenantShare(weight=1, max_concurrent_turns=2, max_active_runs=5)
