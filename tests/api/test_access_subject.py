"""The access log names the end user of each request (issue 30): a user token's `sub`, the user a
browser token was minted for, and nobody ('') for a tenant key, beside the tenant and key id.

The real server on both store backends (SQLite's access.db, a fresh PostgreSQL schema after its
migrations), the real loopback OIDC provider (`tests.identity.idp`); the rows are read back from
the database once the server has closed (which flushes the log).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agentos.mock.server import MockServer
from agentos.testing.tenants import create_tenant_key
from tests.identity.idp import start_idp
from tests.triggers.webhooks import (
    backend,  # noqa: F401  (the fixture: both store backends)
    serve,
)

ADMIN = "admin-token"
TENANT = "acme"
_ROWS = "SELECT path, tenant_id, key_id, subject FROM access_log WHERE path LIKE '/v1/%'"


async def rows(data_dir: Path, store: dict[str, Any]) -> set[tuple[str, str, str, str]]:
    """(path, tenant_id, key_id, subject) of every /v1 row, from whichever database holds them."""
    if not store:
        import sqlite3

        with sqlite3.connect(data_dir / "access.db") as db:
            return set(db.execute(_ROWS))
    import asyncpg

    conn = await asyncpg.connect(store["store"]["postgres_url"])
    try:
        await conn.execute(f'SET search_path TO "{store["store"]["postgres_schema"]}"')
        return {tuple(row) for row in await conn.fetch(_ROWS)}
    finally:
        await conn.close()


async def get(http: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> None:
    async with http.get(url, headers=headers) as r:
        assert r.status == 200, await r.text()


@pytest.mark.slow
async def test_each_row_names_the_user_or_nobody_for_a_key(
    tmp_path: Path,
    mock: MockServer,
    http: aiohttp.ClientSession,
    backend: dict[str, Any],  # noqa: F811
) -> None:
    idp = await start_idp()
    issuer = {"tenant": TENANT, "issuer": idp.issuer, "audience": idp.audience}
    identity = {"issuers": [issuer], "allow_loopback": True}
    server = await serve(tmp_path / "data", mock, backend, server={"api_token": ADMIN}, identity=identity)
    try:
        key = await create_tenant_key(server.url, ADMIN, tenant_id=TENANT)
        alice = {"Authorization": f"Bearer {idp.mint({'sub': 'alice', 'scope': 'sessions:read sessions:write'})}"}
        async with http.post(f"{server.url}/v1/sessions", headers=alice, json={}) as r:
            session_id = (await r.json())["id"]
        async with http.post(f"{server.url}/v1/tokens", headers=alice, json={"session_ids": [session_id]}) as r:
            assert r.status == 201, await r.text()
            browser = {"Authorization": f"Bearer {(await r.json())['token']}"}
        await get(http, f"{server.url}/v1/sessions", alice)
        await get(http, f"{server.url}/v1/sessions/{session_id}", browser)
        await get(http, f"{server.url}/v1/runs", key.headers)
    finally:
        await server.close()
        await idp.close()
    logged = await rows(tmp_path / "data", backend)
    assert ("/v1/sessions", TENANT, "", "alice") in logged  # a user's token: no key, its subject
    assert (f"/v1/sessions/{session_id}", TENANT, "", "alice") in logged  # a browser token: its user's
    assert ("/v1/runs", TENANT, key.key_id, "") in logged  # a tenant key: no subject
