"""Identity providers set over the admin API (`/v1/admin/tenants/{id}/issuers`, issue 30).

The real server on both store backends (SQLite's tenants.db; PostgreSQL, where a second node
shares the schema and hears of the change as of any tenant change), the real loopback OIDC
provider (`tests.identity.idp`). A provider set over the API signs the tenant's users in; once
removed, their tokens are refused (401); what the config file refuses is refused here (400);
admin routes never take a user's token.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agentos.mock.server import MockServer
from agentos.testing import RunningServer, eventually
from agentos.testing.tenants import create_tenant_key
from tests.api.helpers import expect_error
from tests.identity.idp import IdentityProvider, idp_fixture  # noqa: F401  (the fixture `idp`)
from tests.triggers.webhooks import (
    backend,  # noqa: F401  (the fixture: both store backends)
    serve,
)

ADMIN = "admin-token"
ADMIN_HEADERS = {"Authorization": f"Bearer {ADMIN}"}
TENANT = "acme"
PEPPER = "the-same-pepper-on-every-node-of-this-test"  # keys hashed on one node check on the other
NODE: dict[str, Any] = {
    "server": {"api_token": ADMIN},
    "identity": {"allow_loopback": True},
    "security": {"key_pepper": PEPPER},
}
PROPAGATION_S = 10.0  # a change on one node reaches the other through PostgreSQL's NOTIFY


@pytest.fixture
async def server(
    tmp_path: Path,
    mock: MockServer,
    backend: dict[str, Any],  # noqa: F811
) -> AsyncIterator[RunningServer]:
    running = await serve(tmp_path / "a", mock, backend, **NODE)
    await create_tenant_key(running.url, ADMIN, tenant_id=TENANT)  # the tenant, and a key of it
    await create_tenant_key(running.url, ADMIN, tenant_id="bravo")
    yield running
    await running.close()


def provider(idp: IdentityProvider, **fields: Any) -> dict[str, Any]:
    return {"issuer": idp.issuer, "audience": idp.audience, **fields}


async def put(http: aiohttp.ClientSession, url: str, tenant: str, *issuers: dict[str, Any]) -> aiohttp.ClientResponse:
    async with http.put(
        f"{url}/v1/admin/tenants/{tenant}/issuers", json={"issuers": list(issuers)}, headers=ADMIN_HEADERS
    ) as r:
        await r.read()
        return r


async def status_of(http: aiohttp.ClientSession, url: str, token: str) -> int:
    async with http.get(f"{url}/v1/sessions", headers={"Authorization": f"Bearer {token}"}) as r:
        return r.status


async def test_a_provider_set_over_the_api_signs_users_in_until_removed(
    server: RunningServer, idp: IdentityProvider, http: aiohttp.ClientSession
) -> None:
    url, token = server.url, idp.mint({"sub": "alice", "scope": "sessions:read"})
    assert await status_of(http, url, token) == 401  # no provider yet
    r = await put(http, url, TENANT, provider(idp, algorithms=["RS256", "ES256"]))
    assert r.status == 200
    async with http.get(f"{url}/v1/admin/tenants/{TENANT}/issuers", headers=ADMIN_HEADERS) as got:
        shown = await got.json()
    assert shown["tenant_id"] == TENANT
    assert [(i["issuer"], i["audience"], i["algorithms"]) for i in shown["issuers"]] == [
        (idp.issuer, idp.audience, ["RS256", "ES256"])
    ]
    assert await status_of(http, url, token) == 200
    assert await status_of(http, url, idp.mint({"sub": "alice"}, alg="EdDSA")) == 401  # not an allowed alg
    assert (await put(http, url, TENANT, provider(idp, algorithms=["RS256", "ES256"]))).status == 200  # the same
    assert await status_of(http, url, token) == 200
    assert idp.jwks_fetches == 1  # an unchanged provider keeps the keys it fetched
    async with http.delete(f"{url}/v1/admin/tenants/{TENANT}/issuers", headers=ADMIN_HEADERS) as r:
        assert r.status == 204
    assert await status_of(http, url, token) == 401  # the verified token is not kept past the change
    async with http.get(f"{url}/v1/admin/tenants/{TENANT}/issuers", headers=ADMIN_HEADERS) as got:
        assert (await got.json())["issuers"] == [] and (await got.json())["from_config"] == []


async def test_another_node_trusts_and_drops_the_provider_as_it_hears_of_the_tenant(
    tmp_path: Path,
    mock: MockServer,
    server: RunningServer,
    backend: dict[str, Any],  # noqa: F811
    idp: IdentityProvider,
    http: aiohttp.ClientSession,
) -> None:
    if not backend:
        pytest.skip("one node: SQLite's tenants.db belongs to one server")
    other = await serve(tmp_path / "b", mock, backend, **NODE)
    try:
        token = idp.mint({"sub": "alice", "scope": "sessions:read"})
        assert await status_of(http, other.url, token) == 401
        assert (await put(http, server.url, TENANT, provider(idp))).status == 200

        async def accepted() -> bool:
            return await status_of(http, other.url, token) == 200

        await eventually(accepted, timeout_s=PROPAGATION_S, what="the provider on the other node")
        assert (await put(http, server.url, TENANT)).status == 200  # an empty list: none

        async def refused() -> bool:
            return await status_of(http, other.url, token) == 401

        await eventually(refused, timeout_s=PROPAGATION_S, what="the removal on the other node")
    finally:
        await other.close()


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"algorithms": ["none"]}, "'none' is refused"),
        ({"algorithms": ["RS256", "HS256"]}, "'HS256' is refused"),
        ({"algorithms": []}, "none given"),
        ({"allowed_scopes": ["sessions:read", "admin"]}, "'admin' is not a scope a user may hold"),
        ({"default_scopes": ["admin"]}, "'admin' is not a scope a user may hold"),
        ({"jwks_url": "http://169.254.169.254/latest/meta-data"}, "jwks_url"),
        ({"jwks_url": "file:///etc/passwd"}, "scheme 'file' is not allowed"),
        ({"issuer": "http://10.0.0.1/realms/acme"}, "discovery document"),
    ],
)
async def test_what_the_config_file_refuses_is_a_400(
    server: RunningServer, idp: IdentityProvider, http: aiohttp.ClientSession, fields: dict[str, Any], said: str
) -> None:
    async with http.put(
        f"{server.url}/v1/admin/tenants/{TENANT}/issuers",
        json={"issuers": [provider(idp, **fields)]},
        headers=ADMIN_HEADERS,
    ) as r:
        body = await expect_error(r, 400, "invalid_issuer")
    assert said in body["error"]["message"], body
    async with http.get(f"{server.url}/v1/admin/tenants/{TENANT}/issuers", headers=ADMIN_HEADERS) as got:
        assert (await got.json())["issuers"] == []  # nothing was stored


async def test_other_bad_inputs(server: RunningServer, idp: IdentityProvider, http: aiohttp.ClientSession) -> None:
    url = server.url
    twice = await put(http, url, TENANT, provider(idp), provider(idp))
    assert twice.status == 400
    assert (await put(http, url, "nobody", provider(idp))).status == 404
    assert (await put(http, url, TENANT, provider(idp, unknown=1))).status == 422
    assert (await put(http, url, TENANT, {"issuer": idp.issuer})).status == 422  # no audience
    assert (await put(http, url, TENANT, provider(idp))).status == 200
    async with http.put(
        f"{url}/v1/admin/tenants/bravo/issuers", json={"issuers": [provider(idp)]}, headers=ADMIN_HEADERS
    ) as r:
        await expect_error(r, 409, "issuer_taken")  # the same pair would sign users in to two tenants
    assert (await put(http, url, "bravo", provider(idp, audience="bravo-app"))).status == 200


async def test_admin_routes_never_take_a_users_token_nor_a_tenant_key(
    server: RunningServer, idp: IdentityProvider, http: aiohttp.ClientSession
) -> None:
    url = server.url
    assert (await put(http, url, TENANT, provider(idp))).status == 200
    user = {"Authorization": f"Bearer {idp.mint({'sub': 'mallory', 'scope': 'admin all sessions:read'})}"}
    key = (await create_tenant_key(url, ADMIN, tenant_id=TENANT)).headers
    for headers in (user, key):
        for method in ("GET", "PUT", "DELETE"):
            body: dict[str, Any] | None = {"issuers": []} if method == "PUT" else None
            async with http.request(
                method, f"{url}/v1/admin/tenants/{TENANT}/issuers", json=body, headers=headers
            ) as r:
                await expect_error(r, 403, "insufficient_scope")
    assert await status_of(http, url, user["Authorization"].split()[1]) == 200  # the user token itself is good


async def test_a_tenants_provider_closes_the_open_loopback_server(
    tmp_path: Path, mock: MockServer, idp: IdentityProvider, http: aiohttp.ClientSession
) -> None:
    """No token, no key, loopback: open (every request is the default tenant's admin) until a
    tenant trusts a provider; then a request without a credential is a 401, as with one in the file."""
    server = await serve(tmp_path / "open", mock, {}, identity={"allow_loopback": True})
    try:
        async with http.get(f"{server.url}/v1/sessions") as r:
            assert r.status == 200
        async with http.put(f"{server.url}/v1/admin/tenants/default/issuers", json={"issuers": [provider(idp)]}) as r:
            assert r.status == 200, await r.text()
        async with http.get(f"{server.url}/v1/sessions") as r:
            await expect_error(r, 401, "unauthorized")
        assert await status_of(http, server.url, idp.mint({"sub": "alice", "scope": "sessions:read"})) == 200
    finally:
        await server.close()


async def test_removing_the_provider_revokes_the_browser_tokens_its_users_minted(
    server: RunningServer, idp: IdentityProvider, http: aiohttp.ClientSession
) -> None:
    """A browser token a user minted follows its user's provider, as a key's follows the key."""
    url = server.url
    assert (await put(http, url, TENANT, provider(idp))).status == 200
    alice = {"Authorization": f"Bearer {idp.mint({'sub': 'alice', 'scope': 'sessions:read sessions:write'})}"}
    async with http.post(f"{url}/v1/sessions", json={}, headers=alice) as r:
        assert r.status == 201, await r.text()
        session_id = (await r.json())["id"]
    async with http.post(f"{url}/v1/tokens", json={"session_ids": [session_id]}, headers=alice) as r:
        assert r.status == 201, await r.text()
        browser = {"Authorization": f"Bearer {(await r.json())['token']}"}
    async with http.get(f"{url}/v1/sessions/{session_id}", headers=browser) as r:
        assert r.status == 200, await r.text()
    async with http.delete(f"{url}/v1/admin/tenants/{TENANT}/issuers", headers=ADMIN_HEADERS) as r:
        assert r.status == 204
    async with http.get(f"{url}/v1/sessions/{session_id}", headers=browser) as r:
        refused = await expect_error(r, 401, "unauthorized")
    assert "no longer trusts the identity provider" in refused["error"]["message"]


async def test_the_config_files_providers_are_shown_apart_and_a_put_leaves_them(
    tmp_path: Path, mock: MockServer, idp: IdentityProvider, http: aiohttp.ClientSession
) -> None:
    configured = {"tenant": TENANT, "issuer": "https://login.example.com/", "audience": "acme-app"}
    identity = {**NODE["identity"], "issuers": [configured]}
    running = await serve(tmp_path / "a", mock, {}, **{**NODE, "identity": identity})
    try:
        await create_tenant_key(running.url, ADMIN, tenant_id=TENANT)
        assert (await put(http, running.url, TENANT, provider(idp))).status == 200
        async with http.get(f"{running.url}/v1/admin/tenants/{TENANT}/issuers", headers=ADMIN_HEADERS) as got:
            shown = await got.json()
    finally:
        await running.close()
    assert [i["issuer"] for i in shown["issuers"]] == [idp.issuer]
    assert [(i["issuer"], i["audience"]) for i in shown["from_config"]] == [("https://login.example.com/", "acme-app")]
