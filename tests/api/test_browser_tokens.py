"""Browser tokens on the real server: minting, what they may touch, how a page presents them,
and the attacks (docs/security.md, "Browser tokens").

The real server on a loopback port, keys made through the admin API, the real mock provider over
HTTP, real SQLite files; the registry's wall clock is a FakeClock, so expiry and key rotation are
crossed by moving it, never by waiting.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import jwt
import pytest
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from agentos.mock.server import MockServer
from agentos.services import open_services
from agentos.testing import FakeClock, RunningServer, serve_services, sse_events
from agentos.testing.tenants import TenantKey, create_tenant_key
from tests.api.helpers import SSE, expect_error
from tests.conftest import make_settings

ADMIN_TOKEN = "admin-token-for-browser-tokens"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
SCOPES = ["sessions:read", "sessions:write", "runs:read", "runs:write", "agents:read"]
DAY_S = 24 * 3600


@dataclass
class World:
    server: RunningServer
    clock: FakeClock
    data_dir: Path
    a: TenantKey
    b: TenantKey
    mine: str  # tenant A's session the tokens are minted for
    other: str  # another session of tenant A
    theirs: str  # tenant B's session
    closed: bool = False

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            await self.server.close()


async def _open(data_dir: Path, mock: MockServer, clock: FakeClock) -> RunningServer:
    settings = make_settings(data_dir, mock.url, **{"server.api_token": ADMIN_TOKEN, "server.access_log": True})
    return await serve_services(await open_services(settings, now_ms=lambda: int(clock.now() * 1000)))


@pytest.fixture
async def world(tmp_path: Path, mock: MockServer) -> AsyncIterator[World]:
    clock = FakeClock(20_834 * DAY_S + DAY_S / 2)  # mid-period (January 2027): a rotation is half a day away
    server = await _open(tmp_path / "data", mock, clock)
    world: World | None = None
    try:
        a = await create_tenant_key(server.url, ADMIN_TOKEN, tenant_id="acme", scopes=SCOPES)
        b = await create_tenant_key(server.url, ADMIN_TOKEN, tenant_id="bravo", scopes=SCOPES)
        async with aiohttp.ClientSession() as http:
            mine, other, theirs = [await _session(http, server.url, key) for key in (a, a, b)]
        world = World(server, clock, tmp_path / "data", a, b, mine, other, theirs)
        yield world
    finally:
        await (world.close() if world is not None else server.close())


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        yield session


async def _session(http: aiohttp.ClientSession, url: str, key: TenantKey) -> str:
    async with http.post(f"{url}/v1/sessions", json={}, headers=key.headers) as r:
        assert r.status == 201, await r.text()
        session_id: str = (await r.json())["id"]
        return session_id


async def mint(http: aiohttp.ClientSession, w: World, key: TenantKey | None = None, **body: Any) -> str:
    body.setdefault("session_ids", [w.mine])
    async with http.post(f"{w.server.url}/v1/tokens", json=body, headers=(key or w.a).headers) as r:
        assert r.status == 201, await r.text()
        answer = await r.json()
    token: str = answer["token"]
    return token


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def turn(http: aiohttp.ClientSession, url: str, session_id: str, headers: dict[str, str]) -> list[str]:
    async with http.post(f"{url}/v1/sessions/{session_id}/turns", json={"input": "hi"}, headers=SSE | headers) as r:
        assert r.status == 200, await r.text()
        return [e.name async for e in sse_events(r)]


# -- minting and use ------------------------------------------------------------------------------


async def test_a_token_streams_a_turn_of_its_session_and_reads_it(world: World, http: aiohttp.ClientSession) -> None:
    async with http.post(
        f"{world.server.url}/v1/tokens",
        json={"session_ids": [world.mine], "subject": "alice", "expires_in_s": 120},
        headers=world.a.headers,
    ) as r:
        assert r.status == 201, await r.text()
        minted = await r.json()
    assert minted["scopes"] == ["runs:read", "runs:write", "sessions:read", "sessions:write"]
    assert minted["key_id"] == world.a.key_id and minted["subject"] == "alice"
    assert minted["expires_at_ms"] == int(world.clock.now() + 120) * 1000
    claims = jwt.decode(minted["token"], options={"verify_signature": False})
    assert claims["sub"] == "alice" and claims["tid"] == "acme" and claims["res"] == [["session", world.mine]]

    headers = bearer(minted["token"])
    assert (await turn(http, world.server.url, world.mine, headers))[-1] == "turn.completed"
    async with http.get(f"{world.server.url}/v1/sessions/{world.mine}/messages", headers=headers) as r:
        assert r.status == 200 and len((await r.json())["data"]) == 2


async def test_the_jwks_verifies_the_token_and_holds_the_current_and_previous_key(
    world: World, http: aiohttp.ClientSession
) -> None:
    token = await mint(http, world)
    async with http.get(f"{world.server.url}/.well-known/jwks.json") as r:  # no key: it is public
        assert r.status == 200 and "max-age" in r.headers["Cache-Control"]
        keys = (await r.json())["keys"]
    assert len(keys) == 2 and all(k["kty"] == "OKP" and k["alg"] == "EdDSA" and "d" not in k for k in keys)
    kid = jwt.get_unverified_header(token)["kid"]
    assert keys[0]["kid"] == kid
    public = jwt.PyJWK(keys[0]).key
    claims = jwt.decode(token, public, algorithms=["EdDSA"], audience="agentos", options={"verify_iat": False})
    assert claims["pk"] == world.a.key_id


async def test_scopes_are_the_asked_ones_the_key_has(world: World, http: aiohttp.ClientSession) -> None:
    reader = await create_tenant_key(world.server.url, ADMIN_TOKEN, tenant_id="acme", scopes=["sessions:read"])
    async with http.post(
        f"{world.server.url}/v1/tokens",
        json={"session_ids": [world.mine], "scopes": ["sessions:read", "sessions:write"]},
        headers=reader.headers,
    ) as r:
        assert r.status == 201 and (await r.json())["scopes"] == ["sessions:read"]
        token = (await r.json())["token"]
    async with http.post(
        f"{world.server.url}/v1/sessions/{world.mine}/turns", json={"input": "x"}, headers=bearer(token)
    ) as r:
        await expect_error(r, 403, "insufficient_scope")
    async with http.get(f"{world.server.url}/v1/sessions/{world.mine}", headers=bearer(token)) as r:
        assert r.status == 200


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"session_ids": []}, 422, "invalid_input"),  # no resource
        ({"session_ids": ["s"], "scopes": ["admin"]}, 422, "invalid_input"),
        ({"session_ids": ["s"], "scopes": ["agents:write"]}, 422, "invalid_input"),
        ({"session_ids": ["s"], "expires_in_s": 3601}, 422, "invalid_input"),
        ({"session_ids": ["s"], "expires_in_s": 0}, 422, "invalid_input"),
        ({"session_ids": ["s"], "extra": 1}, 422, "invalid_input"),
        ({"session_ids": ["s_unknown"]}, 404, "session_not_found"),
        ({"run_ids": ["r_unknown"]}, 404, "run_not_found"),
    ],
)
async def test_bad_mint_requests_are_refused(
    world: World, http: aiohttp.ClientSession, body: dict[str, Any], status: int, code: str
) -> None:
    body = {k: [world.mine if s == "s" else s for s in v] if k == "session_ids" else v for k, v in body.items()}
    async with http.post(f"{world.server.url}/v1/tokens", json=body, headers=world.a.headers) as r:
        await expect_error(r, status, code)


async def test_only_a_tenant_key_mints(world: World, http: aiohttp.ClientSession) -> None:
    token = await mint(http, world)
    for headers in (ADMIN, bearer(token)):  # the server's api_token has no key to revoke; a token no parent
        async with http.post(f"{world.server.url}/v1/tokens", json={"session_ids": [world.mine]}, headers=headers) as r:
            assert r.status == 403, await r.text()
            assert (await r.json())["error"]["code"] in ("key_required", "insufficient_scope")


# -- the attacks ----------------------------------------------------------------------------------


async def test_another_resource_answers_as_an_unknown_one(world: World, http: aiohttp.ClientSession) -> None:
    headers = bearer(await mint(http, world))
    url = world.server.url
    for session_id in (world.other, world.theirs, "s_no_such_session"):
        async with http.get(f"{url}/v1/sessions/{session_id}/messages", headers=headers) as r:
            body = await expect_error(r, 404, "session_not_found")
        assert body["error"]["message"] == f"session {session_id!r} not found"
        async with http.post(f"{url}/v1/sessions/{session_id}/turns", json={"input": "x"}, headers=headers) as r:
            await expect_error(r, 404, "session_not_found")
    async with http.get(f"{url}/v1/runs/r_other/events", headers=headers) as r:
        await expect_error(r, 404, "run_not_found")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/sessions"),
        ("GET", "/v1/runs"),
        ("GET", "/v1/agents"),
        ("GET", "/v1/usage"),
        ("POST", "/v1/sessions"),
        ("DELETE", "/v1/sessions/{mine}"),
        ("GET", "/v1/admin/tenants"),
        ("GET", "/v1/admin/keys"),
        ("POST", "/v1/tokens"),
        ("GET", "/metrics"),
    ],
)
async def test_list_admin_and_other_routes_refuse_a_browser_token(
    world: World, http: aiohttp.ClientSession, method: str, path: str
) -> None:
    headers = bearer(await mint(http, world))
    url = world.server.url + path.format(mine=world.mine)
    async with http.request(method, url, headers=headers, json={}) as r:
        body = await expect_error(r, 403, "insufficient_scope")
    assert "browser token" in body["error"]["message"]


async def test_a_token_of_one_tenant_never_reaches_another(world: World, http: aiohttp.ClientSession) -> None:
    async with http.post(
        f"{world.server.url}/v1/tokens", json={"session_ids": [world.mine]}, headers=world.b.headers
    ) as r:
        await expect_error(r, 404, "session_not_found")  # B cannot mint for A's session
    theirs = bearer(await mint(http, world, world.b, session_ids=[world.theirs]))
    async with http.get(f"{world.server.url}/v1/sessions/{world.mine}", headers=theirs) as r:
        await expect_error(r, 404, "session_not_found")
    async with http.get(f"{world.server.url}/v1/sessions/{world.theirs}", headers=theirs) as r:
        assert r.status == 200 and (await r.json())["tenant_id"] == "bravo"


async def test_an_expired_token_is_refused(world: World, http: aiohttp.ClientSession) -> None:
    headers = bearer(await mint(http, world, expires_in_s=60))
    url = f"{world.server.url}/v1/sessions/{world.mine}"
    world.clock.advance(60)  # the leeway (5 s) still holds it
    async with http.get(url, headers=headers) as r:
        assert r.status == 200
    world.clock.advance(6)
    async with http.get(url, headers=headers) as r:
        body = await expect_error(r, 401, "unauthorized")
    assert "expired" in body["error"]["message"] and 'error="invalid_token"' in r.headers["WWW-Authenticate"]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _forged(token: str) -> list[str]:
    """The token changed as an attacker would: its signature, its claims, its algorithm."""
    header, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=="))
    wider = _b64(json.dumps(claims | {"res": [["session", "s_x"]], "scope": "admin"}).encode())
    flipped = signature[:-2] + ("AA" if signature[-2:] != "AA" else "BB")
    kid = json.loads(base64.urlsafe_b64decode(header + "=="))["kid"]
    none = _b64(json.dumps({"alg": "none", "typ": "JWT", "kid": kid}).encode())
    return [
        f"{header}.{payload}.{flipped}",
        f"{header}.{wider}.{signature}",
        f"{none}.{payload}.",
        f"{header}.{payload}.",
    ]


async def test_a_tampered_token_is_refused(world: World, http: aiohttp.ClientSession) -> None:
    token = await mint(http, world)
    url = f"{world.server.url}/v1/sessions/{world.mine}"
    for forged in _forged(token):
        async with http.get(url, headers=bearer(forged)) as r:
            await expect_error(r, 401, "unauthorized")


async def test_hs256_signed_with_the_public_key_is_refused(world: World, http: aiohttp.ClientSession) -> None:
    """The key-confusion attack: the public key (from the JWKS) used as an HMAC secret."""
    token = await mint(http, world)
    async with http.get(f"{world.server.url}/.well-known/jwks.json") as r:
        jwk = (await r.json())["keys"][0]
    public = jwt.PyJWK(jwk).key.public_bytes(Encoding.Raw, PublicFormat.Raw)
    claims = jwt.decode(token, options={"verify_signature": False})
    header, payload, _ = token.split(".")
    confused_header = _b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": jwk["kid"]}).encode())
    signing_input = f"{confused_header}.{payload}".encode()
    for secret in (public, jwk["x"].encode()):
        signature = _b64(hmac.new(secret, signing_input, hashlib.sha256).digest())
        async with http.get(
            f"{world.server.url}/v1/sessions/{world.mine}", headers=bearer(f"{confused_header}.{payload}.{signature}")
        ) as r:
            await expect_error(r, 401, "unauthorized")
    assert claims["iss"] == "urn:agentos:server"


async def test_revoking_the_parent_key_refuses_its_tokens_at_once(world: World, http: aiohttp.ClientSession) -> None:
    parent = await create_tenant_key(world.server.url, ADMIN_TOKEN, tenant_id="acme", scopes=SCOPES)
    headers = bearer(await mint(http, world, parent))
    url = f"{world.server.url}/v1/sessions/{world.mine}"
    async with http.get(url, headers=headers) as r:
        assert r.status == 200
    async with http.delete(f"{world.server.url}/v1/admin/keys/{parent.key_id}", headers=ADMIN) as r:
        assert r.status == 200
    async with http.get(url, headers=headers) as r:
        body = await expect_error(r, 401, "unauthorized")
    assert "revoked" in body["error"]["message"]


async def test_a_disabled_tenant_refuses_its_tokens(world: World, http: aiohttp.ClientSession) -> None:
    headers = bearer(await mint(http, world))
    async with http.patch(f"{world.server.url}/v1/admin/tenants/acme", json={"disabled": True}, headers=ADMIN) as r:
        assert r.status == 200
    async with http.get(f"{world.server.url}/v1/sessions/{world.mine}", headers=headers) as r:
        await expect_error(r, 401, "unauthorized")


# -- rotation and restarts ------------------------------------------------------------------------


async def test_keys_rotate_with_one_period_of_overlap(world: World, http: aiohttp.ClientSession) -> None:
    world.clock.advance(DAY_S / 2 - 600)  # ten minutes before the rotation
    headers = bearer(await mint(http, world, expires_in_s=3600))
    url = f"{world.server.url}/v1/sessions/{world.mine}"
    async with http.get(f"{world.server.url}/.well-known/jwks.json") as r:
        before = [k["kid"] for k in (await r.json())["keys"]]
    world.clock.advance(1200)  # across it: the token's key is now the previous one
    async with http.get(f"{world.server.url}/.well-known/jwks.json") as r:
        after = [k["kid"] for k in (await r.json())["keys"]]
    assert after[1] == before[0] and after[0] not in before
    async with http.get(url, headers=headers) as r:
        assert r.status == 200
    assert jwt.get_unverified_header(await mint(http, world))["kid"] == after[0]


async def test_a_restart_keeps_tokens_valid(world: World, http: aiohttp.ClientSession, mock: MockServer) -> None:
    token = await mint(http, world)
    await world.close()
    world.server, world.closed = await _open(world.data_dir, mock, world.clock), False
    async with http.get(f"{world.server.url}/v1/sessions/{world.mine}", headers=bearer(token)) as r:
        assert r.status == 200, await r.text()


# -- how a page presents it ------------------------------------------------------------------------


async def test_a_websocket_presents_its_token_as_a_subprotocol(world: World, http: aiohttp.ClientSession) -> None:
    token = await mint(http, world)
    url = f"{world.server.url}/v1/sessions/{world.mine}/ws"
    async with http.ws_connect(url, protocols=("agentos.v1", f"agentos.bearer.{token}")) as ws:
        assert ws.protocol == "agentos.v1"  # the token is never echoed back
        await ws.send_json({"type": "turn", "input": "hi"})
        names = []
        async for message in ws:
            names.append(json.loads(message.data)["type"])
            if names[-1].startswith("turn.") and names[-1] != "turn.started":
                break
    assert names[-1] == "turn.completed"
    other = f"{world.server.url}/v1/sessions/{world.other}/ws"
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await http.ws_connect(other, protocols=("agentos.v1", f"agentos.bearer.{token}"))
    assert refused.value.status == 404
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await http.ws_connect(url, protocols=("agentos.v1", f"agentos.bearer.{token[:-3]}xyz"))
    assert refused.value.status == 401


async def test_a_websocket_from_a_foreign_origin_is_refused_with_a_good_token(
    world: World, http: aiohttp.ClientSession
) -> None:
    token = await mint(http, world)
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await http.ws_connect(
            f"{world.server.url}/v1/sessions/{world.mine}/ws",
            protocols=("agentos.v1", f"agentos.bearer.{token}"),
            origin="https://evil.example",
        )
    assert refused.value.status == 403


async def test_the_cookie_for_event_source_is_scoped_to_the_resource(world: World, http: aiohttp.ClientSession) -> None:
    token = await mint(http, world)
    async with http.post(f"{world.server.url}/v1/tokens/cookie", headers=bearer(token)) as r:
        assert r.status == 204, await r.text()
        cookie = r.cookies["agentos_token"]
    assert cookie.value == token and cookie["path"] == f"/v1/sessions/{world.mine}"
    assert cookie["httponly"] and cookie["samesite"] == "Strict" and 0 < int(cookie["max-age"]) <= 300
    jar = {"Cookie": f"agentos_token={token}"}
    async with http.get(f"{world.server.url}/v1/sessions/{world.mine}/events", headers=jar) as r:
        assert r.status == 200, await r.text()
    async with http.get(f"{world.server.url}/v1/sessions/{world.other}/events", headers=jar) as r:
        await expect_error(r, 404, "session_not_found")
    # a cookie is taken on GET only: a page of another site cannot make it start a turn
    async with http.post(f"{world.server.url}/v1/sessions/{world.mine}/turns", json={"input": "x"}, headers=jar) as r:
        await expect_error(r, 401, "unauthorized")
    async with http.post(f"{world.server.url}/v1/tokens/cookie", headers=world.a.headers) as r:
        await expect_error(r, 403)


async def test_the_access_log_never_holds_a_token(world: World, http: aiohttp.ClientSession) -> None:
    token = await mint(http, world)
    url = world.server.url
    assert (await turn(http, url, world.mine, bearer(token)))[-1] == "turn.completed"
    async with http.ws_connect(
        f"{url}/v1/sessions/{world.mine}/ws", protocols=("agentos.v1", f"agentos.bearer.{token}")
    ) as ws:
        await ws.close()
    async with http.post(f"{url}/v1/tokens/cookie", headers=bearer(token)) as r:
        assert r.status == 204
    async with http.get(f"{url}/v1/sessions/{world.mine}", headers={"Cookie": f"agentos_token={token}"}) as r:
        assert r.status == 200
    await world.close()  # flushes the access log
    rows = list(
        sqlite3.connect(world.data_dir / "access.db").execute(
            "SELECT method, path, tenant_id, key_id, status FROM access_log WHERE path LIKE ? ORDER BY id",
            (f"/v1/sessions/{world.mine}%",),
        )
    )
    assert len(rows) >= 3 and all(row[2:4] == ("acme", world.a.key_id) for row in rows), rows
    signature = token.rsplit(".", 1)[1]
    for path in world.data_dir.iterdir():
        if path.is_file():
            assert signature.encode() not in path.read_bytes(), path


async def test_a_token_follows_its_run_and_no_other(world: World, http: aiohttp.ClientSession) -> None:
    writer = await create_tenant_key(world.server.url, ADMIN_TOKEN, tenant_id="acme", scopes=[*SCOPES, "agents:write"])
    url = world.server.url
    async with http.post(f"{url}/v1/agents", json={"name": "helper", "tools": []}, headers=writer.headers) as r:
        assert r.status == 201, await r.text()
    runs = []
    for _ in range(2):
        async with http.post(f"{url}/v1/agents/helper/runs", json={"input": "hi"}, headers=writer.headers) as r:
            assert r.status == 202, await r.text()
            runs.append((await r.json())["run_id"])
    headers = bearer(await mint(http, world, writer, session_ids=[], run_ids=[runs[0]], scopes=["runs:read"]))
    async with http.get(f"{url}/v1/runs/{runs[0]}/events", headers=headers) as r:
        assert r.status == 200, await r.text()
        names = [e.name async for e in sse_events(r)]
    assert names[-1] == "run.completed"
    async with http.get(f"{url}/v1/runs/{runs[1]}/events", headers=headers) as r:
        body = await expect_error(r, 404, "run_not_found")
    assert body["error"]["message"] == f"run {runs[1]!r} not found"
    async with http.post(f"{url}/v1/runs/{runs[0]}/cancel", headers=headers) as r:
        await expect_error(r, 403, "insufficient_scope")  # runs:read only
    async with http.get(f"{url}/v1/sessions/{world.mine}", headers=headers) as r:
        await expect_error(r, 404, "session_not_found")


async def test_a_tenant_key_is_taken_from_the_header_alone(world: World, http: aiohttp.ClientSession) -> None:
    url = f"{world.server.url}/v1/sessions/{world.mine}"
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await http.ws_connect(f"{url}/ws", protocols=("agentos.v1", f"agentos.bearer.{world.a.key}"))
    assert refused.value.status == 401
    async with http.get(url, headers={"Cookie": f"agentos_token={world.a.key}"}) as r:
        await expect_error(r, 401, "unauthorized")
