"""The ledger end to end: turns through the real server (loopback port, the real mock provider
over HTTP, keys made through the admin API, SQLite files or PostgreSQL) become ledger rows with
the asking tenant, key and session, and the cost of `[models.m]`'s price; an agent's model
without a price is counted in tokens only. GET /v1/usage reads them back exactly."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agentos.config import settings_from_dict
from agentos.mock.server import MockServer
from agentos.testing import RunningServer, start_server
from agentos.testing.tenants import TenantKey, create_tenant_key
from tests.postgres import fresh_schema

ADMIN = "admin-token-for-the-ledger-e2e"
PRICE = {"input": 2.0, "output": 8.0}  # per million tokens
TURNS = 12  # per tenant, all at once


@pytest.fixture(params=["sqlite", "postgres"])
async def server(request: pytest.FixtureRequest, tmp_path: Path, mock: MockServer) -> AsyncIterator[RunningServer]:
    """The server on SQLite files, or on a fresh PostgreSQL schema (the run journal stays SQLite)."""
    if request.param == "sqlite":
        running = await _serve(tmp_path, mock, {})
        yield running
        await running.close()
        return
    async for config in fresh_schema():
        pg = {"backend": "postgres", "postgres_url": config.postgres_url, "postgres_schema": config.postgres_schema}
        running = await _serve(tmp_path, mock, pg)
        yield running
        await running.close()


async def _serve(tmp_path: Path, mock: MockServer, store: dict[str, Any]) -> RunningServer:
    settings = settings_from_dict(
        {
            "data_dir": str(tmp_path / "data"),
            "store": store,
            "server": {"api_token": ADMIN},
            "providers": {"mock": {"url": mock.url, "max_retries": 0}},
            "models": {
                "m": {"targets": [{"provider": "mock", "model": "mock-large", "price": PRICE}]},
                "free": {"targets": [{"provider": "mock", "model": "mock-small"}]},  # no price
            },
            "agents": {"cheap": {"model": "free", "tools": []}},
        }
    )
    return await start_server(settings)


async def turn(http: aiohttp.ClientSession, url: str, key: TenantKey, agent: str | None = None) -> dict[str, Any]:
    """Open a session, send one whole (JSON) turn; the session id with the turn's usage (a chat
    turn's answer carries it, an agent turn's does not)."""
    body = {"agent": agent} if agent else {}
    async with http.post(f"{url}/v1/sessions", json=body, headers=key.headers) as r:
        assert r.status == 201, await r.text()
        session_id = (await r.json())["id"]
    async with http.post(f"{url}/v1/sessions/{session_id}/turns", json={"input": "hi"}, headers=key.headers) as r:
        assert r.status == 200, await r.text()
        answer: dict[str, Any] = await r.json()
    assert answer["status"] == "completed", answer
    return {"session_id": session_id, **answer.get("usage", {})}


async def usage(http: aiohttp.ClientSession, url: str, key: TenantKey | None, **params: str) -> list[dict[str, Any]]:
    headers = key.headers if key else {"Authorization": f"Bearer {ADMIN}"}
    async with http.get(f"{url}/v1/usage", params=params, headers=headers) as r:
        assert r.status == 200, await r.text()
        data: list[dict[str, Any]] = (await r.json())["data"]
    return data


def cost(prompt: int, completion: int) -> float:
    return (prompt * PRICE["input"] + completion * PRICE["output"]) / 1_000_000


async def test_turns_become_ledger_rows(server: RunningServer, http: aiohttp.ClientSession) -> None:
    url = server.url
    a = await create_tenant_key(url, ADMIN, tenant_id="acme")
    b = await create_tenant_key(url, ADMIN, tenant_id="bravo")
    done = await asyncio.gather(*(turn(http, url, key) for key in (a, b) for _ in range(TURNS)))
    mine, theirs = done[:TURNS], done[TURNS:]

    rows = await usage(http, url, a, group_by="tenant,key,session,model,target")
    assert len(rows) == TURNS
    by_session = {r["session"]: r for r in rows}
    for t in mine:
        row = by_session[t["session_id"]]
        assert (row["tenant"], row["key"], row["model"], row["target"]) == ("acme", a.key_id, "m", "mock/mock-large")
        assert (row["calls"], row["prompt_tokens"], row["completion_tokens"]) == (
            1,
            t["prompt_tokens"],
            t["completion_tokens"],
        )
        assert row["cost"] == pytest.approx(cost(t["prompt_tokens"], t["completion_tokens"]), rel=1e-12)
        assert row["unpriced_calls"] == 0
    [total_b] = await usage(http, url, b)
    assert total_b["calls"] == TURNS
    assert total_b["prompt_tokens"] == sum(t["prompt_tokens"] for t in theirs)
    assert total_b["cost"] == pytest.approx(sum(cost(t["prompt_tokens"], t["completion_tokens"]) for t in theirs))
    everyone = await usage(http, url, None, group_by="tenant")
    assert [(r["tenant"], r["calls"]) for r in everyone] == [("acme", TURNS), ("bravo", TURNS)]


async def test_a_model_without_a_price_is_counted_in_tokens_only(
    server: RunningServer, http: aiohttp.ClientSession
) -> None:
    url = server.url
    a = await create_tenant_key(url, ADMIN, tenant_id="acme")
    await turn(http, url, a, agent="cheap")
    chat_turn = await turn(http, url, a)
    rows = await usage(http, url, a, group_by="model,agent")
    assert [(r["model"], r["agent"], r["calls"], r["unpriced_calls"]) for r in rows] == [
        ("free", "cheap", 1, 1),
        ("m", "", 1, 0),
    ]
    assert rows[0]["cost"] is None and rows[0]["prompt_tokens"] > 0 and rows[0]["completion_tokens"] > 0
    assert rows[1]["cost"] == pytest.approx(cost(chat_turn["prompt_tokens"], chat_turn["completion_tokens"]))
    runs = await usage(http, url, a, group_by="run")
    assert sorted(bool(r["run"]) for r in runs) == [False, True]  # the agent's call was its run's
    [both] = await usage(http, url, a)
    assert (both["calls"], both["cost"], both["unpriced_calls"]) == (2, None, 1)
