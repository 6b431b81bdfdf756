"""`GET /v1/runs`: a tenant's runs, newest first, filtered by status, agent and session, paged
with `{data, next_cursor}` and `?after=`; `status=waiting_human` is the console's inbox.

The real server on each journal backend (`runs.db`, PostgreSQL), real keys of two tenants made
through the admin API, the real mock provider over HTTP (`tools` scenario): runs really wait
for a human, complete and get cancelled before they are listed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agentos.config import settings_from_dict
from agentos.mock.server import MockServer
from agentos.testing import sse_events
from agentos.testing.tenants import create_tenant_key
from tests.api.helpers import assert_documented, expect_error, start_app
from tests.postgres import fresh_schema

A, B = "acme", "bravo"
TOKEN = "run-list-admin-token"
AGENTS = {
    "ask": {"tools": ["ask_human"]},  # the script's two run_command calls fail, then it asks
    "careful": {"tools": ["run_command", "ask_human"], "approval_required": ["run_command"]},
    "chat": {"tools": []},  # no tools: one answer, completed
}
TERMINAL = ("run.completed", "run.failed", "run.cancelled")


@dataclass
class World:
    url: str
    a: dict[str, str]
    b: dict[str, str]
    http: aiohttp.ClientSession

    async def get(self, headers: dict[str, str], path: str, **params: str) -> Any:
        async with self.http.get(f"{self.url}{path}", headers=headers, params=params) as response:
            assert response.status == 200, await response.text()
            return await response.json()

    async def post(self, headers: dict[str, str], path: str, body: Any, status: int) -> Any:
        async with self.http.post(f"{self.url}{path}", headers=headers, json=body) as response:
            assert response.status == status, await response.text()
            return await response.json()

    async def start(self, headers: dict[str, str], agent: str, until: tuple[str, ...], **body: Any) -> str:
        """Start a run and return its id once it sent one of the events `until`."""
        run = await self.post(headers, f"/v1/agents/{agent}/runs", {"input": "go", **body}, 202)
        await self.wait(headers, run["run_id"], until)
        return str(run["run_id"])

    async def wait(self, headers: dict[str, str], run_id: str, until: tuple[str, ...], nth: int = 1) -> None:
        """Until the run's `nth` event of the names `until` (its events replay from the start)."""
        async with self.http.get(f"{self.url}/v1/runs/{run_id}/events", headers=headers) as response:
            assert response.status == 200
            async for event in sse_events(response):  # the client's 30 s timeout bounds it
                nth -= event.name in until
                if nth == 0:
                    return
        raise AssertionError(f"run {run_id} ended without {until}")

    async def ids(self, headers: dict[str, str], **params: str) -> list[str]:
        page = await self.get(headers, "/v1/runs", **params)
        assert_documented(page, "RunPage")
        return [run["run_id"] for run in page["data"]]


@pytest.fixture(params=["sqlite", "postgres"])
async def world(
    request: pytest.FixtureRequest, tmp_path: Path, mock_factory: Callable[..., Awaitable[MockServer]]
) -> AsyncIterator[World]:
    mock = await mock_factory(scenario="tools")
    config: dict[str, Any] = {
        "data_dir": str(tmp_path / "data"),
        "provider": {"url": mock.url, "retry_budget_s": 2.0},
        "agents": AGENTS,
        "server": {"api_token": TOKEN},
    }
    async for store in fresh_schema() if request.param == "postgres" else _none():
        if store is not None:
            config["store"] = {
                "backend": "postgres",
                "postgres_url": store.postgres_url,
                "postgres_schema": store.postgres_schema,
            }
        server = await start_app(settings_from_dict(config))
        try:
            a = (await create_tenant_key(server.url, TOKEN, tenant_id=A)).headers
            b = (await create_tenant_key(server.url, TOKEN, tenant_id=B)).headers
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
                yield World(server.url, a, b, http)
        finally:
            await server.close()


async def _none() -> AsyncIterator[None]:
    yield None


async def test_runs_are_listed_newest_first_with_their_pending_requests(world: World) -> None:
    w = world
    session = (await w.post(w.a, "/v1/sessions", {}, 201))["id"]
    done = await w.start(w.a, "chat", TERMINAL)
    question = await w.start(w.a, "ask", ("human.requested",), session_id=session)
    approval = await w.start(w.a, "careful", ("human.requested",))
    cancelled = await w.start(w.a, "ask", ("human.requested",))
    await w.post(w.a, f"/v1/runs/{cancelled}/cancel", None, 200)
    theirs = await w.start(w.b, "ask", ("human.requested",))

    page = await w.get(w.a, "/v1/runs")
    assert_documented(page, "RunPage")
    assert [r["run_id"] for r in page["data"]] == [cancelled, approval, question, done]
    assert page["next_cursor"] is None
    by_id = {r["run_id"]: r for r in page["data"]}
    assert [by_id[r]["status"] for r in (cancelled, approval, question, done)] == [
        "cancelled",
        "waiting_human",
        "waiting_human",
        "completed",
    ]
    for run_id in (cancelled, done):
        assert "pending" not in by_id[run_id]
    # Each item is the run as GET /v1/runs/{id} shows it.
    for run_id, listed in by_id.items():
        assert listed == await w.get(w.a, f"/v1/runs/{run_id}")
    assert by_id[question]["pending"]["question"] == "Proceed with the final answer?"
    assert by_id[question]["session_id"] == session
    pending = by_id[approval]["pending"]
    assert pending["kind"] == "approval" and pending["tool"] == "run_command"
    assert '"command"' in pending["arguments"] and len(pending["args_hash"]) == 64

    assert await w.ids(w.a, status="waiting_human") == [approval, question]
    assert await w.ids(w.a, status="completed") == [done]
    assert await w.ids(w.a, status="cancelled") == [cancelled]
    assert await w.ids(w.a, status="running") == []
    assert await w.ids(w.a, agent="ask") == [cancelled, question]
    assert await w.ids(w.a, agent="ask", status="waiting_human") == [question]
    assert await w.ids(w.a, session_id=session) == [question]
    assert await w.ids(w.b) == [theirs]
    assert await w.ids(w.b, session_id=session) == []  # A's session: nothing of A's shows through


async def test_the_inbox_gives_what_an_answer_needs(world: World) -> None:
    """What the console does: read the inbox, approve each tool call with the listed hash, answer
    the question, until the run completes and leaves the inbox."""
    w = world
    run_id = await w.start(w.a, "careful", ("human.requested",))
    kinds = []
    for asked in range(2, 5):
        [waiting] = (await w.get(w.a, "/v1/runs", status="waiting_human"))["data"]
        pending = waiting["pending"]
        kinds.append(pending["kind"])
        body = {"operation_id": pending["operation_id"], "answer": "yes"}
        if pending["kind"] == "approval":
            body |= {"approve": True, "args_hash": pending["args_hash"]}
        await w.post(w.a, f"/v1/runs/{run_id}/answer", body, 200)
        await w.wait(w.a, run_id, ("human.requested", *TERMINAL), nth=asked)
    assert kinds == ["approval", "approval", "question"]
    assert await w.ids(w.a, status="waiting_human") == []
    assert await w.ids(w.a, status="completed") == [run_id]


async def test_pages_cover_every_run_once_and_new_runs_do_not_shift_them(world: World) -> None:
    w = world
    started = [await w.start(w.a, "chat", TERMINAL) for _ in range(5)]
    seen: list[str] = []
    newer = None
    params = {"limit": "2"}
    while True:
        page = await w.get(w.a, "/v1/runs", **params)
        assert len(page["data"]) <= 2
        seen += [r["run_id"] for r in page["data"]]
        if page["next_cursor"] is None:
            break
        if len(seen) == 2:  # a run started between two pages comes before the first: no shift
            newer = await w.start(w.a, "chat", TERMINAL)
        params = {"limit": "2", "after": page["next_cursor"]}
    assert seen == started[::-1]
    assert await w.ids(w.a, limit="1") == [newer]
    full = await w.get(w.a, "/v1/runs", limit="6")
    assert full["next_cursor"] is not None  # a full page: the next one may be empty
    assert (await w.get(w.a, "/v1/runs", limit="6", after=full["next_cursor"]))["data"] == []
    assert (await w.get(w.b, "/v1/runs", after=full["next_cursor"]))["data"] == []  # A's cursor shows B nothing


# Each bad query, and the parameter its error names.
BAD_QUERIES = [
    ({"status": "paused"}, "status"),
    ({"status": ""}, "status"),
    ({"status": "terminated"}, "status"),  # a terminated run is `cancelled` (reason: terminated)
    ({"limit": "0"}, "limit"),
    ({"limit": "1001"}, "limit"),
    ({"limit": "x"}, "limit"),
    ({"after": "abc"}, "after"),
    ({"after": "run_0123"}, "after"),
    ({"after": "12:"}, "after"),
    ({"after": "1234567890123456789:run_x"}, "after"),  # 19 digits: past the documented 18
    ({"after": "1:run\x00"}, "after"),
    ({"agent": "ask\x00"}, "agent"),
    ({"session_id": "\x00"}, "session_id"),
]


async def test_bad_parameters_are_a_422_naming_them(world: World) -> None:
    for params, named in BAD_QUERIES:
        async with world.http.get(f"{world.url}/v1/runs", headers=world.a, params=params) as response:
            body = await expect_error(response, 422, "invalid_input")
        assert f"'{named}'" in body["error"]["message"], params
    # The largest of each is taken.
    assert await world.ids(world.a, limit="1000", after="999999999999999999:run_z") == []


async def test_listing_takes_the_runs_read_scope(world: World) -> None:
    w = world
    sessions_only = (await create_tenant_key(w.url, TOKEN, tenant_id=A, scopes=["sessions:read"])).headers
    async with w.http.get(f"{w.url}/v1/runs", headers=sessions_only) as response:
        await expect_error(response, 403, "insufficient_scope")
    read_only = (await create_tenant_key(w.url, TOKEN, tenant_id=A, scopes=["runs:read"])).headers
    assert await w.ids(read_only) == []
