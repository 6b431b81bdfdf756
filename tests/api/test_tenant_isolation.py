"""Two tenants over HTTP, every route (OWASP API1 object-level and API5 function-level authorization).

Tenant A makes a session (with a turn), a run waiting for a human in that session, and an agent
of its own. Tenant B, with a key of every tenant scope, tries every route on A's ids: each answers
exactly as for an id that does not exist (the same status, code and message), lists never show
A's resources, and A's resources are untouched afterwards. A read-only key of A may read but gets
`403 insufficient_scope` on every write. The real server, real keys (made through the admin API),
a real mock provider over HTTP and real SQLite files.

Every test runs twice (issue 30): with two tenants' keys, and with two end users of one tenant
(alice and bob, signed in by a real OIDC provider on loopback, `tests.identity.idp`): bob gets
the same 404s on alice's sessions and runs as another tenant does. Agents belong to the tenant,
not to a user, so the agent routes are the tenants' case only.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agentos.api.keys import SSE_KEEPALIVE_S
from agentos.config import settings_from_dict
from agentos.mock.server import MockServer
from agentos.testing import RunningServer, sse_events
from agentos.testing.tenants import create_tenant_key
from tests.api.helpers import SSE, expect_error, start_app
from tests.identity.idp import IdentityProvider, start_idp

A, B = "acme", "bravo"
ADMIN_TOKEN = "admin-token-for-the-tests"
READ_SCOPES = ["sessions:read", "runs:read", "agents:read"]
ALL_TENANT_SCOPES = [*READ_SCOPES, "sessions:write", "runs:write", "agents:write"]


@dataclass
class World:
    server: RunningServer
    a: dict[str, str]  # headers of a key of tenant A, every tenant scope (users: alice's token)
    b: dict[str, str]  # tenant B, every tenant scope (users: bob's token, of tenant A)
    a_read: dict[str, str]  # tenant A, read scopes only (users: alice's token with those)
    session: str  # A's, with one turn
    run: str  # A's, waiting for a human, in `session`
    operation: str  # the run's pending request
    mode: str = "tenants"  # or "users": two end users of tenant A
    idp: IdentityProvider | None = None
    closed: bool = False

    @property
    def b_tenant(self) -> str:
        return B if self.mode == "tenants" else A

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            await self.server.close()
            if self.idp is not None:
                await self.idp.close()


def user(idp: IdentityProvider, sub: str, scopes: list[str]) -> dict[str, str]:
    return {"Authorization": f"Bearer {idp.mint({'sub': sub, 'scope': ' '.join(scopes)})}"}


@pytest.fixture(params=["tenants", "users"])
async def world(
    request: pytest.FixtureRequest, tmp_path: Path, mock_factory: Callable[..., Awaitable[MockServer]]
) -> AsyncIterator[World]:
    mock = await mock_factory(scenario="tools")
    idp = await start_idp() if request.param == "users" else None
    tree: dict[str, Any] = {
        "data_dir": str(tmp_path / "data"),
        "provider": {"url": mock.url, "retry_budget_s": 2.0},
        "agents": {"ops": {"tools": ["run_command", "ask_human"]}},
        "server": {"api_token": ADMIN_TOKEN},
    }
    if idp is not None:
        issuer = {"tenant": A, "issuer": idp.issuer, "audience": idp.audience}
        tree["identity"] = {"issuers": [issuer], "allow_loopback": True}
    server = await start_app(settings_from_dict(tree), lambda app: app.__setitem__(SSE_KEEPALIVE_S, 0.05))
    world: World | None = None
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
            a = (await create_tenant_key(server.url, ADMIN_TOKEN, tenant_id=A, scopes=ALL_TENANT_SCOPES)).headers
            b = (await create_tenant_key(server.url, ADMIN_TOKEN, tenant_id=B, scopes=ALL_TENANT_SCOPES)).headers
            a_read = (await create_tenant_key(server.url, ADMIN_TOKEN, tenant_id=A, scopes=READ_SCOPES)).headers
            if idp is not None:
                a, b = user(idp, "alice", ALL_TENANT_SCOPES), user(idp, "bob", ALL_TENANT_SCOPES)
                a_read = user(idp, "alice", READ_SCOPES)
            session = await call(http, "POST", f"{server.url}/v1/sessions", a, {}, 201)
            await call(http, "POST", f"{server.url}/v1/sessions/{session['id']}/turns", a, {"input": "hi"}, 200)
            body = {"input": "tidy up", "session_id": session["id"]}
            run = await call(http, "POST", f"{server.url}/v1/agents/ops/runs", a, body, 202)
            operation = await wait_human(http, server, a, run["run_id"])
            await call(http, "POST", f"{server.url}/v1/agents", a, {"name": "mine", "tools": []}, 201)
        world = World(server, a, b, a_read, session["id"], run["run_id"], operation, request.param, idp)
        yield world
    finally:
        await (world.close() if world is not None else server.close())
        if world is None and idp is not None:
            await idp.close()


async def call(
    http: aiohttp.ClientSession, method: str, url: str, headers: dict[str, str], body: Any, status: int
) -> Any:
    async with http.request(method, url, headers=headers, json=body) as response:
        assert response.status == status, (method, url, await response.text())
        return await response.json() if response.content_type == "application/json" else None


async def wait_human(http: aiohttp.ClientSession, server: RunningServer, headers: dict[str, str], run_id: str) -> str:
    async with http.get(f"{server.url}/v1/runs/{run_id}/events", headers=headers) as response:
        assert response.status == 200
        async for event in sse_events(response):
            if event.name == "human.requested":
                return str(event.data["operation_id"])
    raise AssertionError("the run never asked")


def routes(w: World, session: str, run: str, agent: str) -> list[tuple[str, str, Any, dict[str, str]]]:
    """Every route that names a resource: (method, path, body, extra headers)."""
    s, r = f"/v1/sessions/{session}", f"/v1/runs/{run}"
    agents: list[tuple[str, str, Any, dict[str, str]]] = [  # a tenant's, shared by its users
        ("GET", f"/v1/agents/{agent}", None, {}),
        ("POST", f"/v1/agents/{agent}/runs", {"input": "run theirs"}, {}),
    ]
    return [
        ("GET", s, None, {}),
        ("GET", f"{s}/messages", None, {}),
        ("GET", f"{s}/events", None, {}),
        ("POST", f"{s}/turns", {"input": "let me in"}, {}),
        ("POST", f"{s}/turns", {"input": "let me in"}, SSE),
        ("DELETE", f"{s}/turn", None, {}),
        ("GET", r, None, {}),
        ("GET", f"{r}/events", None, {}),
        ("POST", f"{r}/answer", {"operation_id": f"{run}:3", "answer": "yes"}, {}),
        ("POST", f"{r}/cancel", None, {}),
        ("POST", f"{r}/terminate", None, {}),
        ("POST", f"{r}/fork", {"at_seq": 1}, {}),
        *(agents if w.mode == "tenants" else []),
        ("POST", f"{r}/steer", {"input": "steer theirs"}, {}),
        ("GET", f"/v1/sessions/{session}/turns/turn_0000000000000000000000/events", None, {}),
        ("POST", "/v1/agents/ops/runs", {"input": "join theirs", "session_id": session}, {}),
        ("DELETE", s, None, {}),
    ]


async def refusal(
    http: aiohttp.ClientSession, w: World, headers: dict[str, str], method: str, path: str, body: Any, extra: Any
) -> tuple[int, dict[str, Any]]:
    async with http.request(method, f"{w.server.url}{path}", headers={**headers, **extra}, json=body) as response:
        error = await expect_error(response, response.status)
        return response.status, error


async def test_another_tenants_ids_answer_exactly_like_missing_ones(world: World, http: aiohttp.ClientSession) -> None:
    w = world
    theirs = routes(w, w.session, w.run, "mine")
    missing = routes(w, "ses_0000000000000000000000000000000000", "run_00000000000000000000", "nosuch")
    for (method, path, body, extra), (_, missing_path, missing_body, _) in zip(theirs, missing, strict=True):
        status, error = await refusal(http, w, w.b, method, path, body, extra)
        assert status == 404, (method, path, error)
        # exactly the answer for an id that does not exist, the id aside
        nothing_status, nothing = await refusal(http, w, w.b, method, missing_path, missing_body, extra)
        ids = ((w.session, "ses_0000000000000000000000000000000000"), (w.run, "run_00000000000000000000"))
        text = str(error)
        for ours, fake in ids:
            text = text.replace(ours, fake)
        assert (nothing_status, str(nothing)) == (status, text.replace("'mine'", "'nosuch'")), (method, path)
    await assert_untouched(w, http)


async def assert_untouched(w: World, http: aiohttp.ClientSession) -> None:
    url = w.server.url
    info = await call(http, "GET", f"{url}/v1/runs/{w.run}", w.a, None, 200)
    assert info["status"] == "waiting_human" and info["pending"]["operation_id"] == w.operation
    messages = await call(http, "GET", f"{url}/v1/sessions/{w.session}/messages", w.a, None, 200)
    assert [m["content"] for m in messages["data"] if m["role"] == "user"] == ["hi"]  # B's turns never landed
    body = {"operation_id": w.operation, "answer": "yes"}
    assert (await call(http, "POST", f"{url}/v1/runs/{w.run}/answer", w.a, body, 200))["run_id"] == w.run


async def test_lists_never_show_another_tenants_resources(world: World, http: aiohttp.ClientSession) -> None:
    w, url = world, world.server.url
    theirs = await call(http, "GET", f"{url}/v1/sessions", w.b, None, 200)
    assert theirs["data"] == []
    own = await call(http, "POST", f"{url}/v1/sessions", w.b, {}, 201)
    assert own["tenant_id"] == w.b_tenant
    listed = await call(http, "GET", f"{url}/v1/sessions", w.b, None, 200)
    assert [s["id"] for s in listed["data"]] == [own["id"]]
    ours = await call(http, "GET", f"{url}/v1/sessions", w.a, None, 200)
    assert [s["id"] for s in ours["data"]] == [w.session]
    for query in ("", "?status=waiting_human", f"?session_id={w.session}", "?agent=ops"):
        assert (await call(http, "GET", f"{url}/v1/runs{query}", w.b, None, 200))["data"] == [], query
    [waiting] = (await call(http, "GET", f"{url}/v1/runs?status=waiting_human", w.a, None, 200))["data"]
    assert waiting["run_id"] == w.run and waiting["pending"]["operation_id"] == w.operation
    if w.mode == "users":
        await assert_the_tenant_sees_both_users(w, http, own["id"])
        return
    agents = await call(http, "GET", f"{url}/v1/agents", w.b, None, 200)
    assert [a["name"] for a in agents["data"]] == ["ops"]  # the config's; not A's "mine"
    # the same name is free for B: its own agent, not A's
    await call(http, "POST", f"{url}/v1/agents", w.b, {"name": "mine", "tools": ["ask_human"]}, 201)
    assert (await call(http, "GET", f"{url}/v1/agents/mine", w.a, None, 200))["tools"] == []


async def assert_the_tenant_sees_both_users(w: World, http: aiohttp.ClientSession, bobs: str) -> None:
    """A tenant key, and a user token with the `all` scope, see every user's sessions and runs."""
    assert w.idp is not None
    key = (await create_tenant_key(w.server.url, ADMIN_TOKEN, tenant_id=A, scopes=READ_SCOPES)).headers
    for headers in (key, user(w.idp, "carol", ["all", *READ_SCOPES])):
        sessions = await call(http, "GET", f"{w.server.url}/v1/sessions", headers, None, 200)
        assert {w.session, bobs} <= {s["id"] for s in sessions["data"]}
        await call(http, "GET", f"{w.server.url}/v1/sessions/{bobs}", headers, None, 200)
        runs = await call(http, "GET", f"{w.server.url}/v1/runs", headers, None, 200)
        assert w.run in {r["run_id"] for r in runs["data"]}
        await call(http, "GET", f"{w.server.url}/v1/runs/{w.run}", headers, None, 200)


async def test_another_tenants_websocket_is_refused_before_the_upgrade(
    world: World, http: aiohttp.ClientSession
) -> None:
    w = world
    with pytest.raises(aiohttp.WSServerHandshakeError) as caught:
        async with http.ws_connect(f"{w.server.url}/v1/sessions/{w.session}/ws", headers=w.b):
            pass
    assert caught.value.status == 404
    async with http.ws_connect(f"{w.server.url}/v1/sessions/{w.session}/ws", headers=w.a) as ws:
        await ws.send_json({"type": "cancel"})  # the owner's socket works
        await ws.send_json({"type": "turn", "input": "again"})
        async with asyncio.timeout(10):
            async for message in ws:
                if message.json()["type"] in ("turn.completed", "turn.failed", "turn.cancelled"):
                    break


async def test_a_read_only_key_reads_and_cannot_write(world: World, http: aiohttp.ClientSession) -> None:
    w, url = world, world.server.url
    for path in (
        f"/v1/sessions/{w.session}",
        f"/v1/sessions/{w.session}/messages",
        "/v1/sessions",
        "/v1/agents",
        f"/v1/runs/{w.run}",
        "/v1/runs",
        "/v1/agents/mine",
    ):
        await call(http, "GET", f"{url}{path}", w.a_read, None, 200)
    writes = [
        ("POST", "/v1/sessions", {}),
        ("POST", "/v1/agents", {"name": "other", "tools": []}),
        ("POST", "/v1/agents/ops/runs", {"input": "x"}),
        *[(m, p, b) for m, p, b, _ in routes(w, w.session, w.run, "mine") if m != "GET"],
    ]
    for method, path, body in writes:
        async with http.request(method, f"{url}{path}", headers=w.a_read, json=body) as response:
            await expect_error(response, 403, "insufficient_scope")
    with pytest.raises(aiohttp.WSServerHandshakeError) as caught:
        async with http.ws_connect(f"{url}/v1/sessions/{w.session}/ws", headers=w.a_read):
            pass
    assert caught.value.status == 403
    async with http.get(f"{url}/metrics", headers=w.a) as response:  # every tenant's numbers: admin only
        await expect_error(response, 403, "insufficient_scope")
    await assert_untouched(w, http)


async def test_the_access_log_records_the_callers_tenant(world: World, http: aiohttp.ClientSession) -> None:
    w = world
    await call(http, "GET", f"{w.server.url}/v1/sessions", w.b, None, 200)
    await call(http, "GET", f"{w.server.url}/v1/sessions/{w.session}", w.a, None, 200)
    data_dir = Path(w.server.services.settings.data_dir)
    await w.close()  # flushes the access log
    with sqlite3.connect(data_dir / "access.db") as db:
        rows = set(db.execute("SELECT tenant_id, method, path FROM access_log WHERE path LIKE '/v1/sessions%'"))
    assert (w.b_tenant, "GET", "/v1/sessions") in rows
    assert (A, "GET", f"/v1/sessions/{w.session}") in rows


async def test_only_an_admin_key_defines_an_agent_that_starts_a_host_process(
    world: World, http: aiohttp.ClientSession
) -> None:
    w, url = world, world.server.url
    body = {"name": "shell", "tools": [], "mcp_servers": [{"name": "sh", "command": ["sh", "-c", "id"]}]}
    async with http.post(f"{url}/v1/agents", headers=w.a, json=body) as response:
        await expect_error(response, 403, "stdio_mcp_not_allowed")  # agents:write is not enough
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    made = await call(http, "POST", f"{url}/v1/agents", admin, body, 201)
    assert made["mcp_servers"][0]["command"] == ["sh", "-c", "id"]
    async with http.get(f"{url}/v1/agents/shell", headers=w.a) as response:  # the default tenant's, not A's
        await expect_error(response, 404, "agent_not_found")
