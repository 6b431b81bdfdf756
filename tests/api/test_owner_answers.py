"""`owner` in the answers (issue 30): a session, run or schedule shows the end user who made it
(their token's `sub`), or null when a tenant key made it; every answer fits the OpenAPI schema.

The real server on both store backends (SQLite files, a fresh PostgreSQL schema), the real
loopback OIDC provider (`tests.identity.idp`), the real mock provider over HTTP.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agentos.client import AsyncClient
from agentos.mock.server import MockServer
from agentos.testing import RunningServer
from agentos.testing.tenants import create_tenant_key
from tests.api.helpers import assert_documented
from tests.identity.idp import IdentityProvider, idp_fixture  # noqa: F401  (the fixture `idp`)
from tests.triggers.webhooks import (
    backend,  # noqa: F401  (the fixture: both store backends)
    run_outcome,
    serve,
)

ADMIN = "admin-token"
TENANT = "acme"
SCOPES = "sessions:read sessions:write runs:read runs:write schedules:read schedules:write"


@pytest.fixture
async def server(
    tmp_path: Path,
    mock: MockServer,
    backend: dict[str, Any],  # noqa: F811
    idp: IdentityProvider,
) -> AsyncIterator[RunningServer]:
    issuer = {"tenant": TENANT, "issuer": idp.issuer, "audience": idp.audience}
    identity = {"issuers": [issuer], "allow_loopback": True}
    running = await serve(tmp_path / "data", mock, backend, server={"api_token": ADMIN}, identity=identity)
    yield running
    await running.close()


async def call(http: aiohttp.ClientSession, method: str, url: str, headers: dict[str, str], **body: Any) -> Any:
    async with http.request(method, url, headers=headers, json=body or None) as r:
        assert r.status < 300, (method, url, r.status, await r.text())
        return await r.json()


async def make_all(http: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> Ids:
    """A session, a (finished) run in it and a paused schedule, made with `headers`."""
    session = await call(http, "POST", f"{url}/v1/sessions", headers)
    run = await call(http, "POST", f"{url}/v1/agents/echo/runs", headers, input="hi", session_id=session["id"])
    assert await run_outcome(http, url, run["run_id"], headers) == "run.completed"
    schedule = await call(
        http, "POST", f"{url}/v1/schedules", headers, agent="echo", input="x", every_s=3600, paused=True
    )
    assert_documented(session, "Session")
    assert_documented(schedule, "ScheduleDetail")
    return session["id"], run["run_id"], schedule["schedule_id"]


Ids = tuple[str, str, str]  # a session, a run, a schedule


async def shown_owners(http: aiohttp.ClientSession, url: str, headers: dict[str, str], ids: Ids) -> set[str | None]:
    """The `owner` of each of the three in their GET answers and in their lists, as `headers` see them."""
    session_id, run_id, schedule_id = ids
    one = [
        (await call(http, "GET", f"{url}/v1/sessions/{session_id}", headers), "Session"),
        (await call(http, "GET", f"{url}/v1/runs/{run_id}", headers), "Run"),
        (await call(http, "GET", f"{url}/v1/schedules/{schedule_id}", headers), "ScheduleDetail"),
    ]
    for answer, schema in one:
        assert_documented(answer, schema)
    listed = [
        next(s for s in (await call(http, "GET", f"{url}/v1/sessions", headers))["data"] if s["id"] == session_id),
        next(r for r in (await call(http, "GET", f"{url}/v1/runs", headers))["data"] if r["run_id"] == run_id),
        next(
            s
            for s in (await call(http, "GET", f"{url}/v1/schedules", headers))["data"]
            if s["schedule_id"] == schedule_id
        ),
    ]
    for answer, schema in zip(listed, ("Session", "Run", "Schedule"), strict=True):
        assert_documented(answer, schema)
    return {answer["owner"] for answer, _ in one} | {answer["owner"] for answer in listed}


async def test_answers_name_the_user_who_made_it_and_null_for_a_key(
    server: RunningServer, idp: IdentityProvider, http: aiohttp.ClientSession
) -> None:
    url = server.url
    key = (await create_tenant_key(url, ADMIN, tenant_id=TENANT)).headers
    alice = {"Authorization": f"Bearer {idp.mint({'sub': 'alice', 'scope': SCOPES})}"}
    alices = await make_all(http, url, alice)
    keys = await make_all(http, url, key)
    assert await shown_owners(http, url, alice, alices) == {"alice"}  # the user sees her own
    assert await shown_owners(http, url, key, alices) == {"alice"}  # and the tenant sees who made it
    assert await shown_owners(http, url, key, keys) == {None}


async def test_the_typed_client_reads_the_owner(
    server: RunningServer, idp: IdentityProvider, http: aiohttp.ClientSession
) -> None:
    """`agentos.client` shows what the server answers: a user's session and run name her."""
    await create_tenant_key(server.url, ADMIN, tenant_id=TENANT)  # the tenant her provider signs in to
    token = idp.mint({"sub": "alice", "scope": SCOPES})
    session_id, run_id, _ = await make_all(http, server.url, {"Authorization": f"Bearer {token}"})
    async with AsyncClient(server.url, token=token) as client:
        assert (await client.get_session(session_id)).owner == "alice"
        assert (await client.get_run(run_id)).owner == "alice"
        assert (await client.create_session()).owner == "alice"
