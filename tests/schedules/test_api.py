"""Schedules over real HTTP: the real server (SQLite files, or PostgreSQL), the real mock
provider, real time (an `every_s = 1` schedule fires within seconds)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agentos.mock.server import MockServer
from agentos.testing import RunningServer, eventually
from agentos.testing.tenants import create_tenant_key
from tests.api.helpers import assert_documented, expect_error
from tests.identity.idp import start_idp
from tests.triggers.webhooks import (
    backend,  # noqa: F401  (the fixture: both store backends)
    metric,
    run_outcome,
    serve,
)

ADMIN = "admin-token"


@pytest.fixture
async def server(tmp_path: Path, mock: MockServer, backend: dict[str, Any]) -> AsyncIterator[RunningServer]:  # noqa: F811
    running = await serve(tmp_path / "data", mock, backend, schedules={"poll_s": 0.05})
    yield running
    await running.close()


async def create(
    http: aiohttp.ClientSession, url: str, headers: dict[str, str] | None = None, **body: Any
) -> dict[str, Any]:
    body = {"agent": "echo", "input": "the daily report", **body}
    async with http.post(f"{url}/v1/schedules", json=body, headers=headers) as r:
        assert r.status == 201, await r.text()
        created: dict[str, Any] = await r.json()
    return created


async def read(http: aiohttp.ClientSession, url: str, schedule_id: str) -> dict[str, Any]:
    async with http.get(f"{url}/v1/schedules/{schedule_id}") as r:
        assert r.status == 200, await r.text()
        shown: dict[str, Any] = await r.json()
    return shown


async def test_a_schedule_fires_runs_and_shows_its_next_and_last_fires(
    server: RunningServer, http: aiohttp.ClientSession
) -> None:
    url = server.url
    before_ms = int(time.time() * 1000)
    created = await create(http, url, every_s=1)
    schedule_id = created["schedule_id"]
    assert created["every_s"] == 1 and created["cron"] is None and created["paused"] is False
    assert before_ms < created["next_fire_ms"] <= before_ms + 2000 and created["last_fires"] == []
    assert_documented(created, "ScheduleDetail")

    async def fired() -> bool:
        return any(f["status"] in ("started", "finished") for f in (await read(http, url, schedule_id))["last_fires"])

    await eventually(fired, timeout_s=30, what="the schedule's first fire")
    shown = await read(http, url, schedule_id)
    assert_documented(shown, "ScheduleDetail")
    fire = next(f for f in reversed(shown["last_fires"]) if f["run_id"] is not None)
    assert_documented(fire, "ScheduleFire")
    assert (fire["slot_ms"] - created["created_ms"]) % 1000 == 0  # a slot of the schedule, not a clock reading
    assert await run_outcome(http, url, fire["run_id"]) == "run.completed"
    row = await server.services.runs.store.load_run("default", fire["run_id"])
    assert row is not None and row.agent == "echo" and row.input == "the daily report"

    async with http.get(f"{url}/metrics") as r:
        assert metric(await r.text(), 'agentos_schedule_fires_total{outcome="started"}') >= 1
    async with http.get(f"{url}/v1/schedules?limit=1") as r:
        page = await r.json()
    assert_documented(page, "SchedulePage")
    assert [s["schedule_id"] for s in page["data"]] == [schedule_id]

    async with http.post(f"{url}/v1/schedules/{schedule_id}/pause") as r:
        paused = await r.json()
    assert_documented(paused, "Schedule")
    assert paused["paused"] is True and paused["next_fire_ms"] is None
    resumed_at = int(time.time() * 1000)
    async with http.post(f"{url}/v1/schedules/{schedule_id}/resume") as r:
        resumed = await r.json()
    assert resumed["paused"] is False and resumed["next_fire_ms"] > resumed_at  # from the next slot after now

    async with http.delete(f"{url}/v1/schedules/{schedule_id}") as r:
        assert r.status == 204
    async with http.get(f"{url}/v1/schedules/{schedule_id}") as r:
        await expect_error(r, 404, "schedule_not_found")
    async with http.delete(f"{url}/v1/schedules/{schedule_id}") as r:
        await expect_error(r, 404, "schedule_not_found")


async def test_a_cron_schedule_answers_its_next_slot_in_its_zone(
    server: RunningServer, http: aiohttp.ClientSession
) -> None:
    created = await create(http, server.url, cron="30 9 * * *", time_zone="Asia/Kolkata", misfire="run_once")
    assert created["time_zone"] == "Asia/Kolkata" and created["every_s"] is None
    local = time.gmtime(created["next_fire_ms"] / 1000 + 5.5 * 3600)  # Kolkata: UTC+05:30, no daylight saving
    assert (local.tm_hour, local.tm_min, local.tm_sec) == (9, 30, 0)
    assert 0 < created["next_fire_ms"] - time.time() * 1000 <= 24 * 3600 * 1000


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"cron": "every day at nine"}, "invalid_cron"),
        ({"cron": "0 9 * *"}, "invalid_cron"),
        ({"cron": "0 9 31 2 *"}, "invalid_cron"),  # never happens
        ({"cron": "0 9 * * *", "time_zone": "Europe/Atlantis"}, "unknown_time_zone"),
        ({"every_s": 0}, "invalid_input"),
        ({"every_s": 10**9}, "invalid_every"),
        ({"every_s": 60, "cron": "* * * * *"}, "invalid_schedule"),
        ({}, "invalid_schedule"),
        ({"every_s": 60, "agent": "nobody"}, "unknown_agent"),
        ({"every_s": 60, "input": "   "}, "invalid_input"),
        ({"every_s": 60, "overlap": "sometimes"}, "invalid_input"),
        ({"every_s": 60, "max_runs_in_flight": 0}, "invalid_input"),
        ({"every_s": 60, "surprise": 1}, "invalid_input"),
    ],
)
async def test_bad_input_is_a_422(
    tmp_path: Path, mock: MockServer, http: aiohttp.ClientSession, body: dict[str, Any], code: str
) -> None:
    server = await serve(tmp_path / "data", mock, {})
    try:
        async with http.post(f"{server.url}/v1/schedules", json={"agent": "echo", "input": "x", **body}) as r:
            await expect_error(r, 422, code)
        async with http.get(f"{server.url}/v1/schedules") as r:
            assert (await r.json())["data"] == []
    finally:
        await server.close()


@pytest.mark.parametrize("who", ["tenants", "users"])
async def test_another_tenants_schedule_is_a_404_and_scopes_are_checked(
    tmp_path: Path, mock: MockServer, http: aiohttp.ClientSession, who: str
) -> None:
    """Run twice (issue 30): alice and bob as two tenants' keys, then as two end users of one
    tenant signed in by the loopback OIDC provider."""
    idp = await start_idp()
    issuer = {"tenant": "alice", "issuer": idp.issuer, "audience": idp.audience}
    identity = {"issuers": [issuer], "allow_loopback": True}
    server = await serve(tmp_path / "data", mock, {}, server={"api_token": ADMIN}, identity=identity)
    try:
        alice = (await create_tenant_key(server.url, ADMIN, tenant_id="alice")).headers
        bob = (await create_tenant_key(server.url, ADMIN, tenant_id="bob")).headers
        if who == "users":
            scopes = "schedules:read schedules:write"
            alice = {"Authorization": f"Bearer {idp.mint({'sub': 'alice', 'scope': scopes})}"}
            bob = {"Authorization": f"Bearer {idp.mint({'sub': 'bob', 'scope': scopes})}"}
        created = await create(http, server.url, alice, every_s=3600)
        base = f"{server.url}/v1/schedules/{created['schedule_id']}"
        for method, path in [("GET", ""), ("POST", "/pause"), ("POST", "/resume"), ("DELETE", "")]:
            async with http.request(method, base + path, headers=bob) as r:
                await expect_error(r, 404, "schedule_not_found")
        async with http.get(f"{server.url}/v1/schedules", headers=bob) as r:
            assert (await r.json())["data"] == []
        async with http.get(f"{server.url}/v1/schedules", headers=alice) as r:
            assert [s["schedule_id"] for s in (await r.json())["data"]] == [created["schedule_id"]]
        async with http.get(base, headers=alice) as r:
            assert r.status == 200
        reader = await create_tenant_key(server.url, ADMIN, tenant_id="alice", scopes=["schedules:read"])
        body = {"agent": "echo", "input": "x", "every_s": 60}
        async with http.post(f"{server.url}/v1/schedules", json=body, headers=reader.headers) as r:
            await expect_error(r, 403, "insufficient_scope")
        async with http.post(base + "/pause", headers=reader.headers) as r:
            await expect_error(r, 403, "insufficient_scope")
    finally:
        await server.close()
        await idp.close()


async def test_a_tenant_has_at_most_max_schedules(
    tmp_path: Path, mock: MockServer, http: aiohttp.ClientSession
) -> None:
    server = await serve(tmp_path / "data", mock, {}, schedules={"max_schedules": 2})
    try:
        for _ in range(2):
            await create(http, server.url, every_s=3600)
        body = {"agent": "echo", "input": "x", "every_s": 3600}
        async with http.post(f"{server.url}/v1/schedules", json=body) as r:
            await expect_error(r, 409, "too_many_schedules")
    finally:
        await server.close()


async def test_fires_count_against_the_tenants_active_runs(
    tmp_path: Path, mock_factory: Any, http: aiohttp.ClientSession
) -> None:
    """The tenant may run one run at once; its schedule fires every second runs of 1.5 s: the
    fires wait (postponed, the same run id) instead of going over the tenant's cap."""
    mock: MockServer = await mock_factory(ttft_ms=1500, tokens=2)
    server = await serve(tmp_path / "data", mock, {}, tenant_limits={"max_active_runs": 1}, schedules={"poll_s": 0.05})
    try:
        created = await create(http, server.url, every_s=1, max_runs_in_flight=5, overlap="queue")
        await mock.stats.wait_for(lambda s: s.completed >= 3, timeout_s=30, what="three fires' runs")
        async with http.post(f"{server.url}/v1/schedules/{created['schedule_id']}/pause") as r:
            assert r.status == 200
        assert mock.stats.max_concurrent == 1  # one at a time: the tenant's cap held
        async with http.get(f"{server.url}/metrics") as r:
            assert metric(await r.text(), 'agentos_schedule_fires_total{outcome="postponed"}') > 0
    finally:
        await server.close()


async def test_a_place_freed_on_this_node_wakes_the_scheduler_for_the_fire_that_waits(
    tmp_path: Path, mock_factory: Any, http: aiohttp.ClientSession
) -> None:
    """The tenant's one place is held by a run; its schedule's fire is refused and waits (the
    scheduler then polls less and less). The held run's end wakes the scheduler in the same call
    that tells the run's place is free (`ScheduleService.start` listens), and the fire starts."""
    mock: MockServer = await mock_factory(ttft_ms=3000, tokens=2)
    server = await serve(tmp_path / "data", mock, {}, tenant_limits={"max_active_runs": 1})
    scheduler = server.services.schedules.scheduler
    woken_when_freed: list[bool] = []
    stop = server.services.runs.when_runs_free(lambda tenant, runs: woken_when_freed.append(scheduler.woken))
    try:
        async with http.post(f"{server.url}/v1/agents/echo/runs", json={"input": "hold the place"}) as r:
            assert r.status == 202, await r.text()
            held = (await r.json())["run_id"]
        await create(http, server.url, every_s=1, max_runs_in_flight=5, overlap="queue")

        async def postponed_twice() -> bool:  # refused, and a whole round since that knew it
            async with http.get(f"{server.url}/metrics") as r:
                text = await r.text()
            postponed = 'agentos_schedule_fires_total{outcome="postponed"}'
            return postponed in text and metric(text, postponed) >= 2

        await eventually(postponed_twice, timeout_s=10, what="the fire refused at the tenant's cap")
        assert await run_outcome(http, server.url, held) == "run.completed"
        await mock.stats.wait_for(lambda s: s.requests >= 2, timeout_s=10, what="the waiting fire's run")
        assert woken_when_freed and woken_when_freed[0]  # the held run's end woke it
    finally:
        stop()
        await server.close()
