"""The documented maximum of each caller-set limit, on the real server: a tenant's limits (the
admin API) and an agent's run and command limits (the agents API). The largest value is taken
and reads back; one past it is a 422 whose message names the field and the maximum, and changes
nothing. A row stored before the maxima existed reads back at the maximum. Every integer of
every body, against its documented maximum and past 64 bits, is in test_hostile_integers.py."""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import pytest

from agentos.config import Settings
from agentos.config.security import (
    MAX_COMMAND_MB,
    MAX_COMMAND_S,
    MAX_DELEGATION_DEPTH,
    MAX_DELEGATION_WIDTH,
    MAX_HUMAN_TIMEOUT_S,
    MAX_OUTPUT_BYTES,
    MAX_PROCESSES,
    MAX_TOKEN_BUDGET,
    MAX_TURNS,
)
from agentos.config.tenants import (
    MAX_AT_ONCE,
    MAX_BUDGET,
    MAX_PER_MINUTE,
    MAX_RETENTION_S,
    MAX_TOKENS_PER_DAY,
    MAXIMA,
)
from agentos.mock.server import MockServer
from agentos.testing import RunningServer, start_server
from tests.api.helpers import expect_error
from tests.conftest import make_settings
from tests.postgres import fresh_schema

TENANTS = "/v1/admin/tenants"
COMMAND_MAXIMA: dict[str, int | float] = {
    "timeout_s": MAX_COMMAND_S,
    "cpu_s": int(MAX_COMMAND_S),
    "memory_mb": MAX_COMMAND_MB,
    "file_size_mb": MAX_COMMAND_MB,
    "max_processes": MAX_PROCESSES,
    "output_max_bytes": MAX_OUTPUT_BYTES,
}
AGENT_MAXIMA: dict[str, int | float] = {
    "max_turns": MAX_TURNS,
    "token_budget": MAX_TOKEN_BUDGET,
    "max_delegation_depth": MAX_DELEGATION_DEPTH,
    "max_delegation_width": MAX_DELEGATION_WIDTH,
    "human_timeout_s": MAX_HUMAN_TIMEOUT_S,
}
# [security]'s caps at the ceilings, so an API caller may ask for the most any agent may have
CAPS_AT_CEILINGS: dict[str, Any] = {
    "security.max_token_budget": MAX_TOKEN_BUDGET,
    "security.max_delegation_depth": MAX_DELEGATION_DEPTH,
    "security.max_delegation_width": MAX_DELEGATION_WIDTH,
    "security.max_command": COMMAND_MAXIMA,
}


async def _json(r: aiohttp.ClientResponse, status: int) -> Any:
    assert r.status == status, await r.text()
    return await r.json()


def test_the_maxima_are_the_documented_ones() -> None:
    assert {
        **dict.fromkeys(["requests_per_minute", "key_requests_per_minute", "turns_per_minute"], MAX_PER_MINUTE),
        "runs_per_minute": MAX_PER_MINUTE,
        **dict.fromkeys(["user_turns_per_minute", "user_runs_per_minute"], MAX_PER_MINUTE),
        **dict.fromkeys(["max_sessions", "max_concurrent_turns", "max_active_runs"], MAX_AT_ONCE),
        "user_max_concurrent_turns": MAX_AT_ONCE,
        "tokens_per_day": MAX_TOKENS_PER_DAY,
        "weight": 1000,
        **dict.fromkeys(["budget_per_day", "budget_per_month"], MAX_BUDGET),  # currency: any number up to it
        "retention_s": MAX_RETENTION_S,  # a century
    } == MAXIMA
    assert (MAX_PER_MINUTE, MAX_AT_ONCE, MAX_TOKENS_PER_DAY) == (10**9, 10**9, 10**12)


async def test_tenant_limits_at_their_maxima_are_taken_and_past_them_refused(
    server: RunningServer, http: aiohttp.ClientSession
) -> None:
    url = f"{server.url}{TENANTS}"
    async with http.post(url, json={"tenant_id": "big", "limits": MAXIMA}) as r:
        made = await _json(r, 201)
    assert made["limit_overrides"] == MAXIMA and made["limits"] == MAXIMA
    for name, maximum in MAXIMA.items():
        body = {"tenant_id": f"x-{name}".replace("_", "-"), "limits": {name: maximum + 1}}
        async with http.post(url, json=body) as r:
            error = (await expect_error(r, 422, "invalid_input"))["error"]
        assert error["message"] == f"limits.{name}: at most {maximum}, got {maximum + 1}", error
        async with http.patch(f"{url}/big", json={"limits": {name: 2**63}}) as r:
            error = (await expect_error(r, 422, "invalid_input"))["error"]
        assert f"limits.{name}: at most {maximum}" in error["message"], error
    async with http.get(url) as r:
        tenants = (await _json(r, 200))["data"]
    assert [t["tenant_id"] for t in tenants] == ["big", "default"]  # none of the refused was made
    assert tenants[0]["limit_overrides"] == MAXIMA  # nor changed


async def test_agent_limits_at_their_ceilings_are_taken_and_past_them_refused(
    server_factory: Any, mock: MockServer, http: aiohttp.ClientSession
) -> None:
    server = await server_factory(mock.url, **CAPS_AT_CEILINGS)
    body: dict[str, Any] = {"name": "big", "tools": [], **AGENT_MAXIMA, "command": COMMAND_MAXIMA}
    async with http.post(f"{server.url}/v1/agents", json=body) as r:
        await _json(r, 201)
    async with http.get(f"{server.url}/v1/agents/big") as r:
        stored = await _json(r, 200)
    assert {k: stored[k] for k in AGENT_MAXIMA} == AGENT_MAXIMA and stored["command"] == COMMAND_MAXIMA
    past: list[tuple[str, dict[str, Any]]] = [(name, {name: m + 1}) for name, m in AGENT_MAXIMA.items()]
    past += [(f"command.{name}", {"command": {name: m + 1}}) for name, m in COMMAND_MAXIMA.items()]
    for field, change in past:
        async with http.post(f"{server.url}/v1/agents", json={"name": "over", "tools": [], **change}) as r:
            error = (await expect_error(r, 422, "invalid_input"))["error"]
        maximum = AGENT_MAXIMA.get(field, COMMAND_MAXIMA.get(field.removeprefix("command.")))
        assert error["message"].startswith(f"{field}: ") and str(maximum) in error["message"], error
    async with http.get(f"{server.url}/v1/agents") as r:
        assert [a["name"] for a in (await _json(r, 200))["data"]] == ["big"]


STORED = {"weight": 2, "tokens_per_day": 2**63, "max_sessions": 10**30}  # as an older version took them


async def test_a_tenant_row_stored_past_a_maximum_reads_back_at_it(
    tmp_path: Path, mock: MockServer, http: aiohttp.ClientSession
) -> None:
    """A row written before the maxima existed must not make the tenant unreadable (422) nor
    its keys fall back to the defaults: it reads as the maximum."""

    async def write_row() -> None:
        with sqlite3.connect(tmp_path / "data" / "tenants.db") as db:
            db.execute("UPDATE tenants SET limits = ? WHERE tenant_id = 'old'", (msgspec.json.encode(STORED).decode(),))
        db.close()

    await _reads_back_at_the_maxima(make_settings(tmp_path / "data", mock.url), http, write_row)


async def test_a_tenant_row_stored_past_a_maximum_reads_back_at_it_on_postgres(
    tmp_path: Path, mock: MockServer, http: aiohttp.ClientSession
) -> None:
    async for config in fresh_schema():
        schema = config.postgres_schema
        store = {
            "store.backend": "postgres",
            "store.postgres_url": config.postgres_url,
            "store.postgres_schema": schema,
        }
        write_row = partial(_write_pg_row, config.postgres_url, schema)
        await _reads_back_at_the_maxima(make_settings(tmp_path / "data", mock.url, **store), http, write_row)


async def _write_pg_row(url: str, schema: str) -> None:
    asyncpg = pytest.importorskip("asyncpg")
    conn = await asyncpg.connect(url)
    try:
        sql = f"UPDATE {schema}.tenants SET limits = $1::jsonb WHERE tenant_id = 'old'"
        assert await conn.execute(sql, msgspec.json.encode(STORED).decode()) == "UPDATE 1"
    finally:
        await conn.close()


async def _reads_back_at_the_maxima(
    settings: Settings, http: aiohttp.ClientSession, write_row: Callable[[], Awaitable[None]]
) -> None:
    server = await start_server(settings)
    try:
        async with http.post(f"{server.url}{TENANTS}", json={"tenant_id": "old", "limits": {"weight": 2}}) as r:
            await _json(r, 201)
    finally:
        await server.close()
    await write_row()
    server = await start_server(settings)
    try:
        async with http.get(f"{server.url}{TENANTS}/old") as r:
            tenant = await _json(r, 200)
    finally:
        await server.close()
    expected = {"weight": 2, "tokens_per_day": MAX_TOKENS_PER_DAY, "max_sessions": MAX_AT_ONCE}
    assert tenant["limit_overrides"] == expected
    assert {k: tenant["limits"][k] for k in expected} == expected
