"""`GET /v1/admin/memory`: the administrator's (a tenant key gets 403), the allocators' figures,
and the trims after TTL evictions, on a real server."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from agentos.mock.server import MockServer
from agentos.runtime.reclaim import Allocator
from agentos.testing import FakeClock, RunningServer
from agentos.testing.tenants import create_tenant_key
from tests.api.helpers import expect_error
from tests.api.test_auth import ADMIN, TOKEN, Factory


async def test_a_tenant_key_is_refused_and_the_admin_reads_the_figures(
    server_factory: Factory, mock: MockServer, http: aiohttp.ClientSession
) -> None:
    server = await server_factory(mock.url, **{"server.api_token": TOKEN})
    alice = await create_tenant_key(server.url, TOKEN)
    async with http.get(f"{server.url}/v1/admin/memory", headers=alice.headers) as r:
        await expect_error(r, 403, "insufficient_scope")
    async with http.get(f"{server.url}/v1/admin/memory") as r:
        await expect_error(r, 401, "unauthorized")
    async with http.get(f"{server.url}/v1/admin/memory", headers=ADMIN) as r:
        assert r.status == 200, await r.text()
        figures = await r.json()
    assert figures["rss_bytes"] > 0 and figures["allocated_blocks"] > 0 and figures["tracemalloc"] is None
    assert figures["trim"]["trims"] == 0 and figures["trim"]["after_evictions"] == 256


@pytest.mark.skipif(not Allocator().available, reason="malloc_trim is glibc's")
async def test_the_reaper_s_evictions_trim_and_the_figures_say_so(
    server_factory: Factory, mock: MockServer, http: aiohttp.ClientSession
) -> None:
    clock = FakeClock()
    settings = {"kernel.session_ttl_secs": 60, "memory.trim_after_evictions": 4}
    server: RunningServer = await server_factory(mock.url, clock=clock, **settings)
    for _ in range(4):
        async with http.post(f"{server.url}/v1/sessions", json={}) as r:
            assert r.status == 201
    clock.advance(60)
    trimmed = asyncio.create_task(server.runtime.reclaimer.trimmed.wait())
    server.runtime.tick()
    await asyncio.wait_for(trimmed, 5.0)
    async with http.get(f"{server.url}/v1/admin/memory") as r:  # open loopback server: the admin's
        trim = (await r.json())["trim"]
    assert trim["trims"] == 1 and trim["available"] and trim["evicted_since_last"] == 0
    async with http.get(f"{server.url}/metrics") as r:
        assert "agentos_memory_trims_total 1.0" in await r.text()
