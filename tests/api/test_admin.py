"""The admin API: tenants and keys over HTTP, the admin scope, 404s, and the key shown once."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from agentos.mock.server import MockServer
from agentos.testing import RunningServer
from agentos.testing.tenants import create_tenant_key
from tests.api.helpers import expect_error
from tests.api.test_auth import ADMIN, TOKEN, Factory


@pytest.fixture
async def guarded(server_factory: Factory, mock: MockServer) -> RunningServer:
    return await server_factory(mock.url, **{"server.api_token": TOKEN})


async def _json(r: aiohttp.ClientResponse, status: int) -> Any:
    assert r.status == status, await r.text()
    return await r.json()


async def test_tenants_are_created_read_listed_and_updated(guarded: RunningServer, http: aiohttp.ClientSession) -> None:
    url = f"{guarded.url}/v1/admin/tenants"
    async with http.post(url, json={"tenant_id": "acme", "name": "Acme", "limits": {"weight": 3}}, headers=ADMIN) as r:
        made = await _json(r, 201)
    assert made["tenant_id"] == "acme" and made["limit_overrides"] == {"weight": 3} and not made["disabled"]
    assert made["limits"]["weight"] == 3 and made["limits"]["max_sessions"] == 0  # the config's default
    async with http.get(f"{url}/acme", headers=ADMIN) as r:
        assert await _json(r, 200) == made
    async with http.patch(f"{url}/acme", json={"name": "ACME", "limits": {"max_sessions": 2}}, headers=ADMIN) as r:
        changed = await _json(r, 200)
    assert changed["name"] == "ACME" and changed["limit_overrides"] == {"weight": 3, "max_sessions": 2}
    async with http.get(url, params={"limit": "1"}, headers=ADMIN) as r:
        page = await _json(r, 200)
    assert [t["tenant_id"] for t in page["data"]] == ["acme"] and page["next_cursor"] == "acme"
    async with http.get(url, params={"after": "acme"}, headers=ADMIN) as r:
        assert [t["tenant_id"] for t in (await _json(r, 200))["data"]] == ["default"]


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"tenant_id": "Bad Id"}, 422, "invalid_input"),
        ({"tenant_id": "ok", "limits": {"nope": 1}}, 422, "invalid_input"),
        ({"tenant_id": "ok", "limits": {"weight": -1}}, 422, "invalid_input"),
        ({"tenant_id": "ok", "owner": "x"}, 422, "invalid_input"),
        ({"tenant_id": "default"}, 409, "tenant_exists"),
    ],
)
async def test_bad_tenant_bodies_are_json_4xx(
    guarded: RunningServer, http: aiohttp.ClientSession, body: dict[str, Any], status: int, code: str
) -> None:
    async with http.post(f"{guarded.url}/v1/admin/tenants", json=body, headers=ADMIN) as r:
        await expect_error(r, status, code)


async def test_the_key_is_shown_once_and_only_its_id_afterwards(
    guarded: RunningServer, http: aiohttp.ClientSession
) -> None:
    body = {"tenant_id": "default", "name": "ci", "scopes": ["sessions:read"], "expires_in_s": 3600}
    async with http.post(f"{guarded.url}/v1/admin/keys", json=body, headers=ADMIN) as r:
        made = await _json(r, 201)
    key = made.pop("key")
    assert key.startswith(f"aos_{made['key_id']}_")
    assert made["scopes"] == ["sessions:read"] and made["status"] == "active" and made["expires_ms"]
    async with http.get(f"{guarded.url}/v1/admin/keys/{made['key_id']}", headers=ADMIN) as r:
        assert await _json(r, 200) == made
    async with http.get(f"{guarded.url}/v1/admin/keys", params={"tenant_id": "default"}, headers=ADMIN) as r:
        listed = await _json(r, 200)
    assert listed == {"data": [made], "next_cursor": None}
    assert key not in str(listed)


async def test_a_key_without_scopes_gets_every_tenant_scope(guarded: RunningServer) -> None:
    alice = await create_tenant_key(guarded.url, TOKEN)
    assert "admin" not in alice.scopes and {"sessions:write", "runs:write", "agents:write"} <= set(alice.scopes)


async def test_admin_routes_refuse_a_tenant_key(guarded: RunningServer, http: aiohttp.ClientSession) -> None:
    alice = await create_tenant_key(guarded.url, TOKEN)
    calls = [
        ("GET", "/v1/admin/tenants", None),
        ("POST", "/v1/admin/tenants", {"tenant_id": "evil"}),
        ("GET", f"/v1/admin/tenants/{alice.tenant_id}", None),
        ("PATCH", f"/v1/admin/tenants/{alice.tenant_id}", {"limits": {"weight": 1000}}),
        ("POST", "/v1/admin/keys", {"tenant_id": alice.tenant_id, "scopes": ["admin"]}),
        ("GET", "/v1/admin/keys", None),
        ("GET", f"/v1/admin/keys/{alice.key_id}", None),
        ("POST", f"/v1/admin/keys/{alice.key_id}/revoke", None),
        ("DELETE", f"/v1/admin/keys/{alice.key_id}", None),
    ]
    for method, path, body in calls:
        async with http.request(method, f"{guarded.url}{path}", json=body, headers=alice.headers) as r:
            await expect_error(r, 403, "insufficient_scope")
    async with http.get(f"{guarded.url}/v1/admin/tenants/evil", headers=ADMIN) as r:
        await expect_error(r, 404, "tenant_not_found")


async def test_an_admin_key_can_do_what_the_token_does(guarded: RunningServer, http: aiohttp.ClientSession) -> None:
    root = await create_tenant_key(guarded.url, TOKEN, tenant_id="ops", scopes=["admin"])
    other = await create_tenant_key(guarded.url, root.key, tenant_id="team")
    assert other.tenant_id == "team"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/admin/tenants/nobody"),
        ("PATCH", "/v1/admin/tenants/nobody"),
        ("GET", "/v1/admin/keys/nokey"),
        ("POST", "/v1/admin/keys/nokey/revoke"),
        ("DELETE", "/v1/admin/keys/nokey"),
    ],
)
async def test_unknown_ids_are_404(guarded: RunningServer, http: aiohttp.ClientSession, method: str, path: str) -> None:
    async with http.request(method, f"{guarded.url}{path}", json={}, headers=ADMIN) as r:
        await expect_error(r, 404)


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"tenant_id": "nobody"}, 404),
        ({"tenant_id": "default", "scopes": []}, 422),
        ({"tenant_id": "default", "scopes": ["root"]}, 422),
        ({"tenant_id": "default", "expires_in_s": 0}, 422),
        ({"tenant_id": "default", "expires_in_s": 10**12}, 422),
        ({"name": "no tenant"}, 422),
    ],
)
async def test_bad_key_bodies_are_json_4xx(
    guarded: RunningServer, http: aiohttp.ClientSession, body: dict[str, Any], status: int
) -> None:
    async with http.post(f"{guarded.url}/v1/admin/keys", json=body, headers=ADMIN) as r:
        await expect_error(r, status)
    async with http.post(
        f"{guarded.url}/v1/admin/keys", data=b"{not json", headers={**ADMIN, "Content-Type": "application/json"}
    ) as r:
        await expect_error(r, 400, "malformed_json")
    async with http.get(f"{guarded.url}/v1/admin/keys", params={"limit": "0"}, headers=ADMIN) as r:
        await expect_error(r, 422, "invalid_input")
