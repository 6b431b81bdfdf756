"""GET /v1/usage over HTTP: the real server on a loopback port, real keys made through the admin
API, a real SQLite file (and PostgreSQL, `any_backend`). Rows are fed to the router's `Ledger`
(`services.ledger`) directly, as the router does after each call that answered; the end-to-end
path through turns is tests/e2e's once the router is on main.

A tenant's key sees its tenant's totals and nothing of another tenant's, whatever it passes;
an admin key sees every tenant's or the one it names; each bad parameter is a 4xx JSON error."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agentos.mock.server import MockServer
from agentos.providers.base import CallContext, Usage
from agentos.providers.metering import Spend
from agentos.store.ledger import DAY_MS
from agentos.testing import RunningServer, start_server
from agentos.testing.tenants import TenantKey, create_tenant_key
from tests.api.helpers import assert_documented, expect_error
from tests.conftest import make_settings
from tests.postgres import fresh_schema

ADMIN = "admin-token-for-the-usage-tests"
ADMIN_HEADERS = {"Authorization": f"Bearer {ADMIN}"}
DAY0 = 20_000 * DAY_MS  # 2024-10-04
RANGE = {"from": "2024-10-01", "to": "2024-10-31"}


def spend(tenant: str, key: str, n: int, *, cost: float | None = 0.25) -> Spend:
    who = CallContext(tenant_id=tenant, key_id=key, session_id=f"s{n % 2}", run_id="r1" if n % 3 == 0 else "")
    usage = Usage(prompt_tokens=100 + n, completion_tokens=10, cache_read_tokens=n % 7)
    target = "mock/big" if n % 2 else "mock/small"
    return Spend(context=who, model="m", target=target, usage=usage, cost=cost, at_ms=DAY0 + (n % 3) * DAY_MS + n)


class World:
    def __init__(self, server: RunningServer, a: TenantKey, b: TenantKey) -> None:
        self.server, self.a, self.b = server, a, b

    async def get(self, http: aiohttp.ClientSession, headers: dict[str, str], **params: str) -> aiohttp.ClientResponse:
        return await http.get(f"{self.server.url}/v1/usage", params=params, headers=headers)

    async def ok(self, http: aiohttp.ClientSession, headers: dict[str, str], **params: str) -> dict[str, Any]:
        async with await self.get(http, headers, **params) as r:
            assert r.status == 200, await r.text()
            body: dict[str, Any] = await r.json()
        assert_documented(body, "UsageReport")
        return body


async def _world(tmp_path: Path, mock: MockServer, **overrides: Any) -> World:
    settings = make_settings(tmp_path / "data", mock.url, **{"server.api_token": ADMIN}, **overrides)
    server = await start_server(settings)
    a = await create_tenant_key(server.url, ADMIN, tenant_id="acme", scopes=["sessions:read"])
    b = await create_tenant_key(server.url, ADMIN, tenant_id="bravo")
    return World(server, a, b)


@pytest.fixture
async def world(tmp_path: Path, mock: MockServer) -> AsyncIterator[World]:
    w = await _world(tmp_path, mock)
    yield w
    await w.server.close()


@pytest.fixture(params=["sqlite", "postgres"])
async def any_backend(request: pytest.FixtureRequest, tmp_path: Path, mock: MockServer) -> AsyncIterator[World]:
    if request.param == "sqlite":
        w = await _world(tmp_path, mock)
        yield w
        await w.server.close()
        return
    async for config in fresh_schema():
        pg = {"store.backend": "postgres", "store.postgres_url": config.postgres_url}
        w = await _world(tmp_path, mock, **pg, **{"store.postgres_schema": config.postgres_schema})
        yield w
        await w.server.close()


async def test_200_concurrent_calls_are_summed_exactly(any_backend: World, http: aiohttp.ClientSession) -> None:
    w = any_backend
    ledger = w.server.services.ledger
    go = asyncio.Event()

    async def call(n: int) -> None:  # each "model call" ends on its own task, all at once
        await go.wait()
        ledger.record(spend("acme", w.a.key_id, n))
        ledger.record(spend("bravo", w.b.key_id, n, cost=1.0))

    tasks = [asyncio.create_task(call(n)) for n in range(200)]
    await asyncio.sleep(0)  # a yield: every task now waits on `go`
    go.set()
    await asyncio.gather(*tasks)

    body = await w.ok(http, w.a.headers, **RANGE)
    assert body["tenant"] == "acme" and body["group_by"] == [] and body["truncated"] is False
    [total] = body["data"]
    assert total["calls"] == 200 and total["cost"] == 50.0 and total["unpriced_calls"] == 0
    assert total["prompt_tokens"] == sum(100 + n for n in range(200))
    assert total["completion_tokens"] == 2000
    assert total["cache_read_tokens"] == sum(n % 7 for n in range(200))

    by = await w.ok(http, w.a.headers, group_by="day,target", **RANGE)
    cells = {(t["day"], t["target"]): t["calls"] for t in by["data"]}
    expected: dict[tuple[str, str], int] = {}
    for n in range(200):
        key = (f"2024-10-0{4 + n % 3}", "mock/big" if n % 2 else "mock/small")
        expected[key] = expected.get(key, 0) + 1
    assert cells == expected
    assert [(t["day"], t["target"]) for t in by["data"]] == sorted(expected)
    runs = await w.ok(http, w.a.headers, group_by="run,key", **RANGE)
    assert {(t["run"], t["key"]): t["calls"] for t in runs["data"]} == {("", w.a.key_id): 133, ("r1", w.a.key_id): 67}


async def test_a_tenant_never_reaches_another_tenants_usage(world: World, http: aiohttp.ClientSession) -> None:
    world.server.services.ledger.record(spend("acme", world.a.key_id, 1))
    world.server.services.ledger.record(spend("bravo", world.b.key_id, 2, cost=9.0))
    mine = await world.ok(http, world.a.headers, group_by="tenant", **RANGE)
    assert [(t["tenant"], t["cost"]) for t in mine["data"]] == [("acme", 0.25)]
    assert (await world.ok(http, world.a.headers, tenant="acme", **RANGE))["data"][0]["calls"] == 1
    for other in ("bravo", "", "acme,bravo", "*"):
        async with await world.get(http, world.a.headers, tenant=other, **RANGE) as r:
            if other == "":  # none named: its own
                assert [t["calls"] for t in (await r.json())["data"]] == [1]
                continue
            await expect_error(r, 403, "insufficient_scope")
    theirs = await world.ok(http, world.b.headers, group_by="tenant,key", **RANGE)
    assert [(t["tenant"], t["key"], t["cost"]) for t in theirs["data"]] == [("bravo", world.b.key_id, 9.0)]


async def test_an_admin_reads_every_tenant_or_one(world: World, http: aiohttp.ClientSession) -> None:
    for tenant, key, cost in (("acme", world.a.key_id, 0.5), ("bravo", world.b.key_id, None)):
        world.server.services.ledger.record(spend(tenant, key, 1, cost=cost))
    every = await world.ok(http, ADMIN_HEADERS, group_by="tenant", **RANGE)
    assert every["tenant"] is None
    assert [(t["tenant"], t["cost"], t["unpriced_calls"]) for t in every["data"]] == [
        ("acme", 0.5, 0),
        ("bravo", None, 1),  # no price: counted in tokens, its cost unknown (never guessed)
    ]
    one = await world.ok(http, ADMIN_HEADERS, tenant="bravo", group_by="model", **RANGE)
    assert one["tenant"] == "bravo" and [t["prompt_tokens"] for t in one["data"]] == [101]
    [both] = (await world.ok(http, ADMIN_HEADERS, **RANGE))["data"]
    assert (both["calls"], both["cost"], both["unpriced_calls"]) == (2, None, 1)


async def test_range_bounds(world: World, http: aiohttp.ClientSession) -> None:
    for n in range(3):  # one call on each of 2024-10-04, -05, -06
        world.server.services.ledger.record(spend("acme", world.a.key_id, n))
    one_day = await world.ok(http, world.a.headers, **{"from": "2024-10-05", "to": "2024-10-05"})
    assert one_day["to_ms"] - one_day["from_ms"] == DAY_MS and one_day["data"][0]["calls"] == 1
    in_ms = await world.ok(http, world.a.headers, **{"from": str(DAY0), "to": str(DAY0 + DAY_MS + 2)})
    assert in_ms["data"][0]["calls"] == 2  # [DAY0, DAY0 + 1 day + 2 ms): rows at DAY0 and DAY0 + 1 day + 1
    default = await world.ok(http, world.a.headers)  # the 30 days up to today: nothing from 2024
    assert default["data"] == [] and default["to_ms"] - default["from_ms"] == 30 * DAY_MS
    assert default["to_ms"] % DAY_MS == 0


@pytest.mark.parametrize(
    "params",
    [
        {"group_by": "model,nope"},
        {"group_by": "model,model"},
        {"group_by": "model,"},
        {"group_by": "tenant_id"},
        {"group_by": "model;DROP TABLE usage_ledger"},
        {"group_by": "x" * 5000},
        {"from": "yesterday"},
        {"from": "2024-02-30"},
        {"from": "2024-1-05"},
        {"from": "20241005"},
        {"from": "1969-12-31"},
        {"from": "-5"},
        {"from": "+5"},
        {"from": "1e3"},
        {"from": "٣"},
        {"from": "9" * 400},
        {"to": "10000-01-01"},
        {"to": "253402300800000"},
        {"from": "2024-10-05", "to": "2024-10-04"},
        {"from": "5", "to": "5"},
        {"from": "2023-01-01", "to": "2024-10-04"},
        {"from": "0"},
    ],
)
async def test_bad_parameters_are_a_422_naming_them(
    world: World, http: aiohttp.ClientSession, params: dict[str, str]
) -> None:
    async with await world.get(http, world.a.headers, **params) as r:
        body = await expect_error(r, 422, "invalid_input")
    assert any(name in body["error"]["message"] for name in params)


async def test_nul_and_missing_scope_are_refused(world: World, http: aiohttp.ClientSession) -> None:
    async with await world.get(http, world.a.headers, tenant="acme\x00") as r:
        await expect_error(r, 422, "invalid_input")
    runs_only = await create_tenant_key(world.server.url, ADMIN, tenant_id="acme", scopes=["runs:read"])
    async with await world.get(http, runs_only.headers) as r:
        await expect_error(r, 403, "insufficient_scope")
    async with await world.get(http, {}) as r:
        await expect_error(r, 401)
