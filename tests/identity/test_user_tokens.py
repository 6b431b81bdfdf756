"""End users signed in by a real OpenID Connect provider on loopback (tests.identity.idp), over
the real server: tokens it signs are accepted, and each attack is answered 401 with a JSON error.

Tenant "acme" trusts the provider; tenant "bravo" does not. Real keys (RSA, EC, Ed25519), real
discovery and key-set fetches over HTTP, the real server and SQLite files.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import jwt
import pytest
from cryptography.hazmat.primitives import serialization

from agentos.config import settings_from_dict
from agentos.mock.server import MockServer
from agentos.testing import RunningServer, sse_events
from agentos.testing.tenants import create_tenant_key
from tests.api.helpers import SSE, expect_error, start_app
from tests.identity.idp import IdentityProvider, start_idp

A, B = "acme", "bravo"
ADMIN_TOKEN = "admin-token-for-the-identity-tests"
USER_SCOPES = "sessions:read sessions:write runs:read runs:write agents:read"


@dataclass
class World:
    server: RunningServer
    idp: IdentityProvider
    b: dict[str, str]  # a key of tenant B, every tenant scope

    def user(self, sub: str = "alice", scope: str = USER_SCOPES, **claims: Any) -> dict[str, str]:
        return bearer(self.idp.mint({"sub": sub, "scope": scope, **claims}))


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def identity_settings(tmp_path: Path, mock: MockServer, idp: IdentityProvider, **identity: Any) -> dict[str, Any]:
    issuer = {"tenant": A, "issuer": idp.issuer, "audience": idp.audience}
    return {
        "data_dir": str(tmp_path / "data"),
        "provider": {"url": mock.url},
        "server": {"api_token": ADMIN_TOKEN},
        "identity": {"issuers": [issuer], "allow_loopback": True, **identity},
    }


@pytest.fixture
async def world(tmp_path: Path, mock_factory: Callable[..., Awaitable[MockServer]]) -> AsyncIterator[World]:
    idp = await start_idp()
    server = await start_app(settings_from_dict(identity_settings(tmp_path, await mock_factory(), idp)))
    try:
        await create_tenant_key(server.url, ADMIN_TOKEN, tenant_id=A)
        b = (await create_tenant_key(server.url, ADMIN_TOKEN, tenant_id=B)).headers
        yield World(server, idp, b)
    finally:
        await server.close()
        await idp.close()


async def status_of(
    http: aiohttp.ClientSession, method: str, url: str, headers: dict[str, str], body: Any = None
) -> int:
    async with http.request(method, url, headers=headers, json=body) as response:
        return response.status


@pytest.mark.parametrize("alg", ["RS256", "ES256", "EdDSA"])
async def test_a_token_signed_by_the_provider_signs_the_user_in(
    world: World, http: aiohttp.ClientSession, alg: str
) -> None:
    token = world.idp.mint({"sub": "alice", "scope": USER_SCOPES}, alg=alg)
    async with http.post(f"{world.server.url}/v1/sessions", headers=bearer(token), json={}) as response:
        assert response.status == 201, await response.text()
        assert (await response.json())["tenant_id"] == A
    async with http.get(f"{world.server.url}/v1/sessions", headers=bearer(token)) as response:
        assert response.status == 200


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unsigned(idp: IdentityProvider) -> str:
    """`alg: none`: a token signed with nothing."""
    now = int(time.time())
    header = _b64(json.dumps({"alg": "none", "typ": "JWT", "kid": "rsa-1"}).encode())
    claims = {"iss": idp.issuer, "aud": idp.audience, "sub": "mallory", "iat": now, "exp": now + 600}
    return f"{header}.{_b64(json.dumps(claims).encode())}."


def hmac_with_public_key(idp: IdentityProvider) -> str:
    """HS256 "signed" with the provider's RSA public key as the secret (the classic confusion);
    made by hand, as pyjwt itself refuses to use a PEM key as an HMAC secret."""
    now = int(time.time())
    pem = (
        idp.keys["RS256"]
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    header = _b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "rsa-1"}).encode())
    claims = {"iss": idp.issuer, "aud": idp.audience, "sub": "mallory", "iat": now, "exp": now + 600}
    signing_input = f"{header}.{_b64(json.dumps(claims).encode())}"
    return f"{signing_input}.{_b64(hmac.new(pem, signing_input.encode(), hashlib.sha256).digest())}"


def signed_as_is(idp: IdentityProvider, claims: dict[str, Any]) -> str:
    """A token the provider really signed, with claims pyjwt would refuse to encode."""
    now = int(time.time())
    body = {"aud": idp.audience, "sub": "mallory", "iat": now, "exp": now + 600, **claims}
    return jwt.api_jws.encode(json.dumps(body).encode(), idp.keys["RS256"], "RS256", {"kid": "rsa-1"})


def attacks(idp: IdentityProvider) -> dict[str, str]:
    now = int(time.time())
    good = idp.mint({"sub": "alice"})
    head, body, signature = good.split(".")
    forged = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    forged["sub"] = "root"
    return {
        "wrong issuer": idp.mint({"iss": "https://evil.example"}),
        "wrong audience": idp.mint({"aud": "another-app"}),
        "expired": idp.mint({"iat": now - 7200, "exp": now - 3600}),
        "not yet valid": idp.mint({"nbf": now + 3600}),
        "issued in the future": idp.mint({"iat": now + 3600, "exp": now + 7200}),
        "no exp": idp.mint({"exp": None}),
        "no sub": idp.mint({"sub": None}),
        "alg none": unsigned(idp),
        "HS256 with the public key": hmac_with_public_key(idp),
        "ES256 naming the RSA key": idp.mint(alg="ES256", kid="rsa-1"),
        "claims changed after signing": f"{head}.{_b64(json.dumps(forged).encode())}.{signature}",
        "unknown kid": idp.mint(kid="nobody-knows"),
        "garbage": "eyJ.not.a-token",
        "iss a list": signed_as_is(idp, {"iss": [idp.issuer]}),
        "aud of objects": idp.mint({"aud": [{"a": 1}]}),
        "sub a number": idp.mint({"sub": 42}),
    }


REASONS = {  # each attack is refused for its own reason, not by accident of another check
    "wrong issuer": "unknown issuer",
    "wrong audience": "wrong audience",
    "expired": "expired",
    "not yet valid": "not yet valid (nbf)",
    "issued in the future": "not yet valid (iat)",
    "no exp": '"exp"',
    "no sub": '"sub"',
    "alg none": "algorithm 'none' is not allowed",
    "HS256 with the public key": "algorithm 'HS256' is not allowed",
    "ES256 naming the RSA key": "not an ES256 key",
    "claims changed after signing": "Signature verification failed",
    "unknown kid": "no signing key 'nobody-knows'",
    "garbage": "malformed token",
    "iss a list": "unknown issuer",
    "aud of objects": "wrong audience",
    "sub a number": "Subject must be a string",
}


async def test_each_attack_is_answered_401_with_a_json_error(world: World, http: aiohttp.ClientSession) -> None:
    url = f"{world.server.url}/v1/sessions"
    async with http.get(url, headers=world.user()) as response:  # the provider's keys are in hand
        assert response.status == 200
    for name, token in attacks(world.idp).items():
        async with http.get(url, headers=bearer(token)) as response:
            error = await expect_error(response, 401, "unauthorized")
            assert response.headers["WWW-Authenticate"].startswith("Bearer"), name
            assert REASONS[name] in error["error"]["message"], (name, error)


async def test_an_unknown_kid_storm_fetches_the_key_set_a_bounded_number_of_times(
    world: World, http: aiohttp.ClientSession
) -> None:
    url = f"{world.server.url}/v1/sessions"
    assert await status_of(http, "GET", url, world.user()) == 200
    before = world.idp.jwks_fetches
    for i in range(50):
        token = world.idp.mint({"sub": f"u{i}"}, kid=f"made-up-{i}")
        assert await status_of(http, "GET", url, bearer(token)) == 401
    assert world.idp.jwks_fetches - before <= 1  # one refetch per interval (60 s), not one per token


async def test_a_verified_token_is_not_verified_again_and_keys_outlive_a_provider_outage(
    world: World, http: aiohttp.ClientSession
) -> None:
    url = f"{world.server.url}/v1/sessions"
    headers = world.user()
    assert await status_of(http, "GET", url, headers) == 200
    fetches = world.idp.jwks_fetches
    world.idp.down = True
    assert await status_of(http, "GET", url, headers) == 200  # the same token: from the cache
    assert await status_of(http, "GET", url, world.user(sub="bob")) == 200  # a new one: the cached keys
    assert world.idp.jwks_fetches == fetches


async def test_a_token_of_tenant_a_on_tenant_bs_resource_answers_404(world: World, http: aiohttp.ClientSession) -> None:
    async with http.post(f"{world.server.url}/v1/sessions", headers=world.b, json={}) as response:
        theirs = (await response.json())["id"]
    async with http.get(
        f"{world.server.url}/v1/sessions/{theirs}", headers=world.user(scope="all " + USER_SCOPES)
    ) as r:
        await expect_error(r, 404)
    async with http.get(f"{world.server.url}/v1/sessions/{theirs}", headers=world.b) as response:
        assert response.status == 200


async def test_admin_routes_never_accept_a_users_token(world: World, http: aiohttp.ClientSession) -> None:
    headers = world.user(scope="all admin " + USER_SCOPES)  # `admin` in the claim is never granted
    for path in ("/v1/admin/tenants", f"/v1/admin/tenants/{A}", "/v1/admin/keys", "/metrics"):
        async with http.get(f"{world.server.url}{path}", headers=headers) as response:
            await expect_error(response, 403, "insufficient_scope")


async def test_a_server_with_an_identity_provider_is_never_open(
    tmp_path: Path, mock: MockServer, http: aiohttp.ClientSession
) -> None:
    """A loopback server without keys is open to anyone (the README's commands need no key);
    one that signs users in is not: no token is a 401, not the default tenant's admin."""
    idp = await start_idp()
    tree = identity_settings(tmp_path, mock, idp)
    del tree["server"]
    server = await start_app(settings_from_dict(tree))
    try:
        await server.services.tenants.create_tenant(A)
        async with http.get(f"{server.url}/v1/sessions") as response:
            await expect_error(response, 401, "unauthorized")
        token = idp.mint({"sub": "alice", "scope": USER_SCOPES})
        assert await status_of(http, "GET", f"{server.url}/v1/sessions", bearer(token)) == 200
    finally:
        await server.close()
        await idp.close()


async def test_each_user_has_its_own_request_limit_with_the_usual_429_and_headers(
    tmp_path: Path, mock: MockServer, http: aiohttp.ClientSession
) -> None:
    """`key_requests_per_minute` limits each user's token as it limits a key: alice's requests
    do not spend bob's (nor a key's), and her 429 is the keys' own, with its headers."""
    idp = await start_idp()
    tree = identity_settings(tmp_path, mock, idp) | {"tenant_limits": {"key_requests_per_minute": 2}}
    server = await start_app(settings_from_dict(tree))
    try:
        await server.services.tenants.create_tenant(A)
        url = f"{server.url}/v1/sessions"
        alice, bob = (
            bearer(idp.mint({"sub": "alice", "scope": USER_SCOPES})),
            bearer(idp.mint({"sub": "bob", "scope": USER_SCOPES})),
        )
        for _ in range(2):
            async with http.get(url, headers=alice) as response:
                assert response.status == 200
                assert response.headers["RateLimit-Policy"] == '"key";q=2;w=60'
        async with http.get(url, headers=alice) as response:
            await expect_error(response, 429)
            assert int(response.headers["Retry-After"]) >= 1
            assert response.headers["RateLimit"].startswith('"key";r=0')
        async with http.get(url, headers=bob) as response:
            assert response.status == 200
    finally:
        await server.close()
        await idp.close()


async def test_what_shows_the_whole_tenant_needs_the_all_scope(world: World, http: aiohttp.ClientSession) -> None:
    for path in ("/v1/usage", "/v1/console/metrics", "/v1/console/stream"):
        async with http.get(f"{world.server.url}{path}", headers=world.user()) as response:
            await expect_error(response, 403, "insufficient_scope")
    async with http.get(f"{world.server.url}/v1/usage", headers=world.user(scope="all " + USER_SCOPES)) as response:
        assert response.status == 200


async def test_each_user_has_its_own_turns_per_minute(
    tmp_path: Path, mock: MockServer, http: aiohttp.ClientSession
) -> None:
    """`user_turns_per_minute` beside the tenant's `turns_per_minute`: alice's second turn of the
    minute is a 429 `turn_rate_limited` with Retry-After; bob's first is not."""
    idp = await start_idp()
    tree = identity_settings(tmp_path, mock, idp) | {"tenant_limits": {"user_turns_per_minute": 1}}
    server = await start_app(settings_from_dict(tree))
    try:
        await server.services.tenants.create_tenant(A)
        for sub, statuses in (("alice", (200, 429)), ("bob", (200,))):
            headers = bearer(idp.mint({"sub": sub, "scope": USER_SCOPES}))
            async with http.post(f"{server.url}/v1/sessions", headers=headers, json={}) as response:
                session = (await response.json())["id"]
            for status in statuses:
                url = f"{server.url}/v1/sessions/{session}/turns"
                async with http.post(url, headers=headers, json={"input": "hi"}) as response:
                    if status == 429:
                        await expect_error(response, 429, "turn_rate_limited")
                        assert int(response.headers["Retry-After"]) >= 1
                    else:
                        assert response.status == status, await response.text()
    finally:
        await server.close()
        await idp.close()


async def test_each_user_has_its_own_concurrent_turns(
    tmp_path: Path, mock_factory: Callable[..., Awaitable[MockServer]], http: aiohttp.ClientSession
) -> None:
    """`user_max_concurrent_turns = 1`: while alice's turn runs (a slow provider), her second
    session's turn is a 429 `user_concurrent_turns`; bob's turn is not; once hers ends, she may."""
    idp = await start_idp()
    mock = await mock_factory(ttft_ms=30_000)
    tree = identity_settings(tmp_path, mock, idp) | {"tenant_limits": {"user_max_concurrent_turns": 1}}
    server = await start_app(settings_from_dict(tree))
    try:
        await server.services.tenants.create_tenant(A)
        alice, bob = world_user(idp, "alice"), world_user(idp, "bob")
        first, second, bobs = [await new_session(http, server, h) for h in (alice, alice, bob)]
        async with started_turn(http, server, alice, first):
            async with http.post(f"{server.url}/v1/sessions/{second}/turns", headers=alice, json={"input": "hi"}) as r:
                await expect_error(r, 429, "user_concurrent_turns")
                assert int(r.headers["Retry-After"]) >= 1
            async with started_turn(http, server, bob, bobs, settle=False):
                pass  # bob's count is his own
        async with started_turn(http, server, alice, second):
            pass  # hers ended (cancelled): she may again
    finally:
        await server.close()
        await idp.close()


def world_user(idp: IdentityProvider, sub: str) -> dict[str, str]:
    return bearer(idp.mint({"sub": sub, "scope": USER_SCOPES}))


async def new_session(http: aiohttp.ClientSession, server: RunningServer, headers: dict[str, str]) -> str:
    async with http.post(f"{server.url}/v1/sessions", headers=headers, json={}) as response:
        assert response.status == 201, await response.text()
        return str((await response.json())["id"])


@asynccontextmanager
async def started_turn(
    http: aiohttp.ClientSession, server: RunningServer, headers: dict[str, str], session: str, *, settle: bool = True
) -> AsyncIterator[None]:
    """A turn of `session`, started (its `turn.started` read), cancelled and ended on exit;
    `settle`: then wait until no turn is live (the count falls when the turn's task ends)."""
    url = f"{server.url}/v1/sessions/{session}"
    async with http.post(f"{url}/turns", headers={**headers, **SSE}, json={"input": "slow"}) as running:
        assert running.status == 200, await running.text()
        events = sse_events(running)
        async for event in events:
            if event.name == "turn.started":
                break
        yield
        async with http.delete(f"{url}/turn", headers=headers) as response:
            assert response.status < 300, await response.text()
        async for event in events:
            if event.name in ("turn.cancelled", "turn.completed", "turn.failed"):
                break
    if settle:
        assert await server.services.runtime.wait_idle(10)


async def test_the_verifier_counts_on_metrics(world: World, http: aiohttp.ClientSession) -> None:
    headers = world.user()
    for _ in range(3):  # verified once, then from the cache
        assert await status_of(http, "GET", f"{world.server.url}/v1/sessions", headers) == 200
    assert await status_of(http, "GET", f"{world.server.url}/v1/sessions", bearer(world.idp.mint(kid="x"))) == 401
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    async with http.get(f"{world.server.url}/metrics", headers=admin) as response:
        text = await response.text()
    assert "agentos_user_tokens_verified_total 1.0" in text
    assert "agentos_user_tokens_refused_total 1.0" in text
    assert "agentos_user_tokens_cached 1.0" in text
    assert "agentos_identity_fetches_total 2.0" in text  # the discovery document, then the key set


async def test_a_signed_in_user_mints_browser_tokens_for_their_own_sessions_only(
    world: World, http: aiohttp.ClientSession
) -> None:
    """POST /v1/tokens with a user's token: the browser token is that user's (their subject, their
    resources only), narrowed to the sessions named; another user's session is a 404 to mint."""
    url = world.server.url
    alice, bob = world.user(sub="alice"), world.user(sub="bob")
    sessions = {}
    for name, headers in (("alice", alice), ("bob", bob)):
        async with http.post(f"{url}/v1/sessions", headers=headers, json={}) as response:
            sessions[name] = (await response.json())["id"]
    async with http.post(f"{url}/v1/tokens", headers=alice, json={"session_ids": [sessions["bob"]]}) as response:
        await expect_error(response, 404)  # bob's session, as an unknown one
    async with http.post(
        f"{url}/v1/tokens", headers=alice, json={"session_ids": [sessions["alice"]], "subject": "bob"}
    ) as response:
        await expect_error(response, 403, "insufficient_scope")  # not for another user
    async with http.post(f"{url}/v1/tokens", headers=alice, json={"session_ids": [sessions["alice"]]}) as response:
        assert response.status == 201, await response.text()
        minted = await response.json()
    assert minted["subject"] == "alice" and minted["key_id"] is None
    page = bearer(minted["token"])
    async with http.post(
        f"{url}/v1/sessions/{sessions['alice']}/turns", headers=page | SSE, json={"input": "hi"}
    ) as response:
        assert response.status == 200
        assert [e.name async for e in sse_events(response)][-1] == "turn.completed"
    async with http.get(f"{url}/v1/sessions/{sessions['bob']}/messages", headers=page) as response:
        await expect_error(response, 404)  # outside its resources
    async with http.post(f"{url}/v1/tokens", headers=page, json={"session_ids": [sessions["alice"]]}) as response:
        await expect_error(response, 403, "insufficient_scope")  # a browser token mints nothing: not its route
