"""Budgets on a real server and the real mock provider over HTTP: a turn, a run and an
OpenAI-door turn refused with 402 `budget_exceeded` before anything starts, the real cost
settled after each call, a run stopped `failed` when a step cannot be held, another tenant
untouched, and hostile budget values answered 4xx JSON.

The model `m` is priced at 10 per million output tokens with `max_tokens = 100`: every call's
worst case is 0.001 (input is free), whatever the prompt; the mock answers 4 tokens (0.00004).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agentos.config import settings_from_dict
from agentos.mock.server import MockServer
from agentos.tenancy.budgets import DAY_S
from agentos.testing import FakeClock, RunningServer, sse_events, start_server
from agentos.testing.tenants import create_tenant_key
from tests.api.helpers import SSE, expect_error

ADMIN = "admin-token-for-budgets"
WORST = 0.001  # 100 tokens at 10 per million
REAL = 0.00004  # the mock's 4 tokens


def priced(mock_url: str, data_dir: Path, *, input_price: float = 0.0, **tree: Any) -> dict[str, Any]:
    """A server tree whose one model `m` has a price and a `max_tokens` (so a worst case)."""
    target = {"provider": "mock", "model": "mock-1", "max_tokens": 100, "price": {"input": input_price, "output": 10.0}}
    return {
        "data_dir": str(data_dir),
        "providers": {"mock": {"url": mock_url, "max_retries": 0}},
        "models": {"m": {"targets": [target]}},
        "routing": {"default_model": "m"},
        "server": {"api_token": ADMIN},
        **tree,
    }


WALL = FakeClock(time.time())  # the budgets' calendar: never moved here


@asynccontextmanager
async def served(tree: dict[str, Any], wall: FakeClock = WALL) -> AsyncIterator[RunningServer]:
    server = await start_server(settings_from_dict(tree), wall_clock=wall)
    try:
        yield server
    finally:
        await server.close()


async def new_session(http: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> str:
    async with http.post(f"{url}/v1/sessions", json={}, headers=headers) as r:
        assert r.status == 201, await r.text()
        session_id: str = (await r.json())["id"]
        return session_id


async def turn(http: aiohttp.ClientSession, url: str, key: dict[str, str], session_id: str) -> aiohttp.ClientResponse:
    async with http.post(f"{url}/v1/sessions/{session_id}/turns", json={"input": "hi"}, headers=SSE | key) as response:
        await response.read()
        return response


def today_counter(tenant_id: str) -> str:
    return f"tenant:{tenant_id}:day:{int(WALL.now() // DAY_S)}"


async def test_a_turn_past_the_tenants_budget_is_402_before_its_stream_and_the_rest_are_settled(
    tmp_path: Path, mock: MockServer, http: aiohttp.ClientSession
) -> None:
    async with served(priced(mock.url, tmp_path)) as server:
        capped = await create_tenant_key(server.url, ADMIN, limits={"budget_per_day": 2.5 * WORST})
        free = await create_tenant_key(server.url, ADMIN)
        sid = await new_session(http, server.url, capped.headers)
        for _ in range(3):  # each holds 0.001 and settles at 0.00004: far from the 0.0025
            assert (await turn(http, server.url, capped.headers, sid)).status == 200
        budgets = server.services.budgets
        assert budgets is not None
        assert budgets.spent(today_counter(capped.tenant_id)) == pytest.approx(3 * REAL)
        admin = {"Authorization": f"Bearer {ADMIN}"}
        async with http.patch(
            f"{server.url}/v1/admin/tenants/{capped.tenant_id}",
            json={"limits": {"budget_per_day": 0.0005}},
            headers=admin,
        ) as r:
            assert r.status == 200, await r.text()
        response = await turn(http, server.url, capped.headers, sid)
        body = await expect_error(response, 402, "budget_exceeded")
        assert response.headers["Content-Type"].startswith("application/json")  # no stream was started
        assert f"tenant:{capped.tenant_id}:day" in body["error"]["message"]
        other = await new_session(http, server.url, free.headers)
        assert (await turn(http, server.url, free.headers, other)).status == 200  # another tenant: untouched
        async with http.get(f"{server.url}/metrics", headers=admin) as r:
            assert 'agentos_budget_refusals_total{budget="tenant",reason="exceeded"} 1.0' in await r.text()


async def test_a_budgeted_tenant_cannot_call_an_unpriced_model(
    tmp_path: Path, mock: MockServer, http: aiohttp.ClientSession
) -> None:
    tree = {"data_dir": str(tmp_path), "provider": {"url": mock.url}, "server": {"api_token": ADMIN}}
    async with served(tree) as server:  # the simple [provider] form: no price
        capped = await create_tenant_key(server.url, ADMIN, limits={"budget_per_month": 100.0})
        sid = await new_session(http, server.url, capped.headers)
        body = await expect_error(await turn(http, server.url, capped.headers, sid), 402, "budget_exceeded")
        assert "no price" in body["error"]["message"]
        free = await create_tenant_key(server.url, ADMIN)
        sid = await new_session(http, server.url, free.headers)
        assert (await turn(http, server.url, free.headers, sid)).status == 200  # no budget: no limit


@pytest.mark.slow
async def test_concurrent_turns_on_one_node_hold_no_more_than_the_budget(
    tmp_path: Path, mock_factory: Callable[..., Awaitable[MockServer]], http: aiohttp.ClientSession
) -> None:
    mock = await mock_factory(ttft_ms=1000)  # every turn is admitted long before the first one settles
    async with served(priced(mock.url, tmp_path)) as server:
        capped = await create_tenant_key(server.url, ADMIN, limits={"budget_per_day": 5 * WORST})
        sessions = [await new_session(http, server.url, capped.headers) for _ in range(15)]
        answers = await asyncio.gather(*(turn(http, server.url, capped.headers, sid) for sid in sessions))
        statuses = sorted(r.status for r in answers)
        assert statuses == [200] * 5 + [402] * 10
        budgets = server.services.budgets
        assert budgets is not None
        assert budgets.spent(today_counter(capped.tenant_id)) == pytest.approx(5 * REAL)


async def test_the_openai_door_answers_402_in_openais_shape(
    tmp_path: Path, mock: MockServer, http: aiohttp.ClientSession
) -> None:
    async with served(priced(mock.url, tmp_path)) as server:
        capped = await create_tenant_key(server.url, ADMIN, limits={"budget_per_day": 0.0001})
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}  # the default model: a plain chat turn
        async with http.post(f"{server.url}/v1/chat/completions", json=body, headers=capped.headers) as r:
            assert r.status == 402
            error = (await r.json())["error"]
        assert error["code"] == "budget_exceeded" and "type" in error and "budget" in error["message"]


async def run_outcome(http: aiohttp.ClientSession, url: str, headers: dict[str, str], run_id: str) -> dict[str, Any]:
    async with http.get(f"{url}/v1/runs/{run_id}/events", headers=headers) as r:
        async for event in sse_events(r):
            if event.name in ("run.completed", "run.failed", "run.cancelled"):
                break
    async with http.get(f"{url}/v1/runs/{run_id}", headers=headers) as r:
        return dict(await r.json())


async def test_runs_are_refused_402_at_the_start_and_stopped_failed_at_a_step_that_cannot_be_held(
    tmp_path: Path, mock: MockServer, http: aiohttp.ClientSession
) -> None:
    # Input costs 10 a million bytes here: the admission holds the input's worst case, the
    # run's first step holds its whole prompt (system prompt, tool schemas), which is more.
    tree = priced(mock.url, tmp_path, input_price=10.0, agents={"helper": {"model": "m", "tools": ["run_command"]}})
    async with served(tree) as server:
        broke = await create_tenant_key(server.url, ADMIN, limits={"budget_per_day": 0.0005})
        async with http.post(f"{server.url}/v1/agents/helper/runs", json={"input": "go"}, headers=broke.headers) as r:
            await expect_error(r, 402, "budget_exceeded")
        tight = await create_tenant_key(server.url, ADMIN, limits={"budget_per_day": 0.00102})
        async with http.post(f"{server.url}/v1/agents/helper/runs", json={"input": "go"}, headers=tight.headers) as r:
            assert r.status == 202, await r.text()
            run_id = (await r.json())["run_id"]
        run = await run_outcome(http, server.url, tight.headers, run_id)
        assert run["status"] == "failed"
        assert run["reason"] == f"budget_exceeded: tenant:{tight.tenant_id}:day", run


@pytest.mark.parametrize(
    "raw",
    [
        b'{"limits": {"budget_per_day": -1}}',
        b'{"limits": {"budget_per_day": "5"}}',
        b'{"limits": {"budget_per_day": 1e400}}',
        b'{"limits": {"budget_per_day": NaN}}',
        b'{"limits": {"budget_per_month": Infinity}}',
        b'{"limits": {"budget_per_month": 1000000001}}',
        b'{"limits": {"budget_per_month": true}}',
    ],
)
async def test_hostile_budgets_are_4xx_json_and_change_nothing(
    tmp_path: Path, mock: MockServer, http: aiohttp.ClientSession, raw: bytes
) -> None:
    async with served(priced(mock.url, tmp_path)) as server:
        admin = {"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"}
        async with http.patch(f"{server.url}/v1/admin/tenants/default", data=raw, headers=admin) as r:
            error = (await r.json())["error"]
            assert (r.status, error["code"]) in ((422, "invalid_input"), (400, "malformed_json")), error
        async with http.get(f"{server.url}/v1/admin/tenants/default", headers=admin) as r:
            assert (await r.json())["limit_overrides"] == {}


async def test_a_keys_own_budget_holds_that_key_back_and_not_its_tenants_other_keys(
    tmp_path: Path, mock: MockServer, http: aiohttp.ClientSession
) -> None:
    async with served(priced(mock.url, tmp_path)) as server:
        admin = {"Authorization": f"Bearer {ADMIN}"}
        first = await create_tenant_key(server.url, ADMIN, limits={"budget_per_month": 1.0})
        body = {"tenant_id": first.tenant_id, "budget_per_day": 0.0005}
        async with http.post(f"{server.url}/v1/admin/keys", json=body, headers=admin) as r:
            made = await r.json()
            assert r.status == 201 and made["budget_per_day"] == 0.0005, made
        capped = {"Authorization": f"Bearer {made['key']}"}
        sid = await new_session(http, server.url, capped)
        refused = await expect_error(await turn(http, server.url, capped, sid), 402, "budget_exceeded")
        assert f"'key:{made['key_id']}:day'" in refused["error"]["message"]
        assert (await turn(http, server.url, first.headers, sid)).status == 200  # the tenant's other key
        raised = {"budget_per_day": 0.01}
        async with http.patch(f"{server.url}/v1/admin/keys/{made['key_id']}", json=raised, headers=admin) as r:
            assert r.status == 200 and (await r.json())["budget_per_day"] == 0.01
        assert (await turn(http, server.url, capped, sid)).status == 200
        for bad in (-1, "1", True, 10**10):
            async with http.patch(
                f"{server.url}/v1/admin/keys/{made['key_id']}", json={"budget_per_month": bad}, headers=admin
            ) as r:
                await expect_error(r, 422, "invalid_input")
            async with http.post(
                f"{server.url}/v1/admin/keys", json={"tenant_id": first.tenant_id, "budget_per_day": bad}, headers=admin
            ) as r:
                await expect_error(r, 422, "invalid_input")


async def test_a_runs_own_budget_stops_it_at_the_step_it_cannot_hold(
    tmp_path: Path, mock_factory: Callable[..., Awaitable[MockServer]], http: aiohttp.ClientSession
) -> None:
    mock = await mock_factory(scenario="tools")  # the model asks for tools, then answers: several steps
    agents = {
        "thrifty": {"model": "m", "tools": ["run_command", "ask_human"], "max_cost": 0.00102},
        "broke": {"model": "m", "tools": ["run_command"], "max_cost": 0.0005},
    }
    async with served(priced(mock.url, tmp_path, agents=agents)) as server:
        admin = {"Authorization": f"Bearer {ADMIN}"}
        async with http.post(f"{server.url}/v1/agents/broke/runs", json={"input": "go"}, headers=admin) as r:
            refused = await expect_error(r, 402, "budget_exceeded")  # its first call's 0.001 is past its 0.0005
        assert "budget 'run:run_" in refused["error"]["message"]
        async with http.post(f"{server.url}/v1/agents/thrifty/runs", json={"input": "go"}, headers=admin) as r:
            assert r.status == 202, await r.text()
            run_id = (await r.json())["run_id"]
        run = await run_outcome(http, server.url, admin, run_id)  # step 1 costs 0.00004: step 2 does not fit
        assert (run["status"], run["reason"]) == ("failed", f"budget_exceeded: run:{run_id}")
        assert mock.stats.completed == 1  # only thrifty's first step reached the provider


async def test_what_was_spent_survives_a_restart_from_the_usage_ledger(
    tmp_path: Path, mock: MockServer, http: aiohttp.ClientSession
) -> None:
    # 0.00107: two calls (0.001 held, 0.00004 spent each) fit; a third after them does not
    tree = priced(mock.url, tmp_path, tenant_limits={"budget_per_day": 0.00107})
    admin = {"Authorization": f"Bearer {ADMIN}"}  # the server's token acts for tenant "default"
    async with served(tree) as server:
        sid = await new_session(http, server.url, admin)
        for _ in range(2):
            assert (await turn(http, server.url, admin, sid)).status == 200
    later = FakeClock(time.time() + 60)  # the ledger's rows are stamped by the real clock: all before
    async with served(tree, later) as server:
        budgets = server.services.budgets
        assert budgets is not None
        assert budgets.spent(f"tenant:default:day:{int(later.now() // DAY_S)}") == pytest.approx(2 * REAL)
        response = await turn(http, server.url, admin, await new_session(http, server.url, admin))
        await expect_error(response, 402, "budget_exceeded")  # forgotten, it would have fit


async def test_an_agents_turn_is_held_once_its_run_takes_the_admission_hold(
    tmp_path: Path, mock: MockServer, http: aiohttp.ClientSession
) -> None:
    # 0.0015 holds one worst case (0.001), not two: the turn's hold and its run's would not fit
    tree = priced(mock.url, tmp_path, agents={"helper": {"model": "m", "tools": []}})
    async with served(tree) as server:
        capped = await create_tenant_key(server.url, ADMIN, limits={"budget_per_day": 0.0015})
        async with http.post(f"{server.url}/v1/sessions", json={"agent": "helper"}, headers=capped.headers) as r:
            sid = (await r.json())["id"]
        async with http.post(
            f"{server.url}/v1/sessions/{sid}/turns", json={"input": "hi"}, headers=SSE | capped.headers
        ) as r:
            assert r.status == 200
            names = [e.name async for e in sse_events(r)]
        assert names[-1] == "turn.completed", names


def test_the_routes_that_start_work_document_their_402() -> None:
    from tests.api.helpers import OPENAPI

    paths = OPENAPI["paths"]
    for path in ("/v1/sessions/{session_id}/turns", "/v1/agents/{name}/runs", "/v1/chat/completions", "/v1/responses"):
        assert "budget_exceeded" in paths[path]["post"]["responses"]["402"]["description"], path
    assert "402" not in paths["/v1/sessions"]["post"]["responses"]  # a session holds no budget


async def test_a_run_requests_its_own_budget_within_its_agents(
    tmp_path: Path, mock_factory: Callable[..., Awaitable[MockServer]], http: aiohttp.ClientSession
) -> None:
    mock = await mock_factory(scenario="tools")
    agents = {
        "open": {"model": "m", "tools": ["run_command", "ask_human"]},
        "capped": {"model": "m", "tools": ["run_command"], "max_cost": 0.01},
    }
    async with served(priced(mock.url, tmp_path, agents=agents)) as server:
        admin = {"Authorization": f"Bearer {ADMIN}"}
        runs = f"{server.url}/v1/agents/%s/runs"
        async with http.post(runs % "capped", json={"input": "go", "max_cost": 0.02}, headers=admin) as r:
            error = (await expect_error(r, 422, "invalid_input"))["error"]
        assert "at most the agent's max_cost (0.01)" in error["message"]
        for bad in (0, -1, "1", True):
            async with http.post(runs % "open", json={"input": "go", "max_cost": bad}, headers=admin) as r:
                await expect_error(r, 422, "invalid_input")
        async with http.post(runs % "open", json={"input": "go", "max_cost": 0.0005}, headers=admin) as r:
            await expect_error(r, 402, "budget_exceeded")  # its own budget cannot hold the first call
        async with http.post(runs % "open", json={"input": "go", "max_cost": 0.00102}, headers=admin) as r:
            assert r.status == 202, await r.text()
            run_id = (await r.json())["run_id"]
        run = await run_outcome(http, server.url, admin, run_id)  # kept with the run: its step 2 is refused
        assert (run["status"], run["reason"]) == ("failed", f"budget_exceeded: run:{run_id}")
