"""The auth middleware on the real server: open loopback, the token, keys, and the 401s."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from multidict import CIMultiDict

from agentos.mock.server import MockServer
from agentos.services import open_services
from agentos.testing import FakeClock, RunningServer, serve_services
from agentos.testing.tenants import create_tenant_key
from tests.api.helpers import expect_error
from tests.conftest import make_settings

TOKEN = "test-admin-token"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}

Factory = Callable[..., Awaitable[RunningServer]]


@pytest.fixture
async def guarded(server_factory: Factory, mock: MockServer) -> RunningServer:
    return await server_factory(mock.url, **{"server.api_token": TOKEN})


async def _status(http: aiohttp.ClientSession, url: str, headers: dict[str, str] | None = None) -> int:
    async with http.get(url, headers=headers or {}) as r:
        return r.status


async def test_an_open_loopback_server_needs_no_key_until_the_first_key_exists(
    server: RunningServer, http: aiohttp.ClientSession
) -> None:
    assert await _status(http, f"{server.url}/v1/sessions") == 200
    assert await _status(http, f"{server.url}/v1/sessions", {"Authorization": "Bearer whatever"}) == 200
    async with http.post(f"{server.url}/v1/admin/keys", json={"tenant_id": "default", "scopes": ["admin"]}) as r:
        assert r.status == 201
        key = (await r.json())["key"]
    async with http.get(f"{server.url}/v1/sessions") as r:
        await expect_error(r, 401, "unauthorized")
        assert r.headers["WWW-Authenticate"].startswith("Bearer")
    assert await _status(http, f"{server.url}/v1/sessions", {"Authorization": f"Bearer {key}"}) == 200


async def test_the_token_is_an_admin_of_the_default_tenant(guarded: RunningServer, http: aiohttp.ClientSession) -> None:
    async with http.post(f"{guarded.url}/v1/sessions", json={}, headers=ADMIN) as r:
        assert r.status == 201 and (await r.json())["tenant_id"] == "default"
    assert await _status(http, f"{guarded.url}/v1/admin/tenants", ADMIN) == 200
    assert await _status(http, f"{guarded.url}/v1/sessions", {"Authorization": f"bearer {TOKEN}"}) == 200


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer"},
        {"Authorization": "Bearer wrong"},
        {"Authorization": f"Basic {TOKEN}"},
        {"Authorization": f"Bearer {TOKEN}x"},
        {"X-API-Key": TOKEN},
    ],
)
async def test_a_missing_or_wrong_credential_is_a_401(
    guarded: RunningServer, http: aiohttp.ClientSession, headers: dict[str, str]
) -> None:
    async with http.get(f"{guarded.url}/v1/sessions", headers=headers) as r:
        await expect_error(r, 401, "unauthorized")
        assert r.headers["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize("second", [f"Bearer {TOKEN}", "Bearer wrong", ""])
async def test_two_authorization_headers_are_a_400_whichever_comes_first(
    guarded: RunningServer, http: aiohttp.ClientSession, second: str
) -> None:
    """A singleton field sent twice: a proxy in front may have judged the other one, so neither
    is taken (it was the first, silently)."""
    for pair in ([f"Bearer {TOKEN}", second], [second, f"Bearer {TOKEN}"]):
        headers = CIMultiDict(("Authorization", value) for value in pair)
        async with http.get(f"{guarded.url}/v1/sessions", headers=headers) as r:
            body = await expect_error(r, 400, "bad_request")
        assert "Authorization: send it once" in body["error"]["message"]


async def test_a_key_is_never_taken_from_the_url(guarded: RunningServer, http: aiohttp.ClientSession) -> None:
    alice = await create_tenant_key(guarded.url, TOKEN)
    for query in ({"access_token": alice.key}, {"key": alice.key}, {"api_key": alice.key}):
        async with http.get(f"{guarded.url}/v1/sessions", params=query) as r:
            await expect_error(r, 401)


async def test_open_routes_need_no_key(guarded: RunningServer, http: aiohttp.ClientSession) -> None:
    for path in ("/healthz", "/readyz", "/openapi.json", "/docs"):
        assert await _status(http, f"{guarded.url}{path}") == 200, path
    assert await _status(http, f"{guarded.url}/metrics") == 401


async def test_a_revoked_key_stops_working_at_the_next_request(
    guarded: RunningServer, http: aiohttp.ClientSession
) -> None:
    alice = await create_tenant_key(guarded.url, TOKEN, tenant_id="alice")
    assert await _status(http, f"{guarded.url}/v1/sessions", alice.headers) == 200
    async with http.post(f"{guarded.url}/v1/admin/keys/{alice.key_id}/revoke", headers=ADMIN) as r:
        assert r.status == 200 and (await r.json())["status"] == "revoked"
    async with http.get(f"{guarded.url}/v1/sessions", headers=alice.headers) as r:
        body = await expect_error(r, 401)
        assert "revoked" in body["error"]["message"]
        assert 'error="invalid_token"' in r.headers["WWW-Authenticate"]


async def test_a_disabled_tenant_keys_are_refused(guarded: RunningServer, http: aiohttp.ClientSession) -> None:
    bob = await create_tenant_key(guarded.url, TOKEN, tenant_id="bob")
    async with http.patch(f"{guarded.url}/v1/admin/tenants/bob", json={"disabled": True}, headers=ADMIN) as r:
        assert r.status == 200 and (await r.json())["disabled"] is True
    async with http.get(f"{guarded.url}/v1/sessions", headers=bob.headers) as r:
        assert "disabled" in (await expect_error(r, 401))["error"]["message"]
    async with http.patch(f"{guarded.url}/v1/admin/tenants/bob", json={"disabled": False}, headers=ADMIN) as r:
        assert r.status == 200
    assert await _status(http, f"{guarded.url}/v1/sessions", bob.headers) == 200


async def test_a_key_expires_on_the_servers_clock(
    tmp_path: Path, mock: MockServer, http: aiohttp.ClientSession
) -> None:
    clock = FakeClock(1_800_000_000.0)
    settings = make_settings(tmp_path / "data", mock.url, **{"server.api_token": TOKEN})
    services = await open_services(settings, now_ms=lambda: int(clock.now() * 1000))
    server = await serve_services(services)
    url = server.url
    try:
        carol = await create_tenant_key(url, TOKEN, expires_in_s=60)
        assert await _status(http, f"{url}/v1/sessions", carol.headers) == 200
        clock.advance(60)
        async with http.get(f"{url}/v1/sessions", headers=carol.headers) as r:
            assert "expired" in (await expect_error(r, 401))["error"]["message"]
        async with http.get(f"{url}/v1/admin/keys/{carol.key_id}", headers=ADMIN) as r:
            assert (await r.json())["status"] == "expired"
    finally:
        await server.close()


async def test_the_access_log_names_the_key_id_and_never_the_key(
    server_factory: Factory, mock: MockServer, http: aiohttp.ClientSession, tmp_path: Path, caplog: Any
) -> None:
    caplog.set_level(logging.DEBUG)
    server = await server_factory(mock.url, **{"server.api_token": TOKEN, "server.access_log": True})
    alice = await create_tenant_key(server.url, TOKEN, tenant_id="alice")
    assert await _status(http, f"{server.url}/v1/sessions", alice.headers) == 200
    broken = alice.key[:-1] + ("A" if alice.key[-1] != "A" else "B")  # a failed checksum: no key_id
    forged = alice.key[:17] + "0" * 36  # well-formed prefix and id, wrong secret and checksum
    for headers in ({"Authorization": f"Bearer {broken}"}, {"Authorization": f"Bearer {forged}"}, {}):
        assert await _status(http, f"{server.url}/v1/sessions", headers) == 401
    await server.close()  # flushes the access log

    rows = sqlite3.connect(tmp_path / "data" / "access.db").execute(
        "SELECT tenant_id, key_id, status FROM access_log WHERE path = '/v1/sessions' ORDER BY id"
    )
    assert list(rows) == [("alice", alice.key_id, 200), ("", "", 401), ("", "", 401), ("", "", 401)]
    secret = alice.key[17:-6]
    for path in (tmp_path / "data").iterdir():
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path
    assert secret not in caplog.text and TOKEN not in caplog.text


async def test_a_well_formed_key_that_fails_is_logged_with_its_key_id(
    server_factory: Factory, mock: MockServer, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    server = await server_factory(mock.url, **{"server.api_token": TOKEN, "server.access_log": True})
    alice = await create_tenant_key(server.url, TOKEN, tenant_id="alice")
    async with http.delete(f"{server.url}/v1/admin/keys/{alice.key_id}", headers=ADMIN) as r:
        assert r.status == 200
    assert await _status(http, f"{server.url}/v1/sessions", alice.headers) == 401
    await server.close()
    rows = sqlite3.connect(tmp_path / "data" / "access.db").execute(
        "SELECT tenant_id, key_id, status FROM access_log WHERE path = '/v1/sessions'"
    )
    assert list(rows) == [("", alice.key_id, 401)]


async def test_with_the_store_off_keys_live_in_memory(
    server_factory: Factory, mock: MockServer, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    server = await server_factory(mock.url, **{"server.api_token": TOKEN, "store.enabled": False})
    alice = await create_tenant_key(server.url, TOKEN)
    assert await _status(http, f"{server.url}/v1/sessions", alice.headers) == 200
    assert not (tmp_path / "data" / "tenants.db").exists() and not (tmp_path / "data" / "key_pepper").exists()


async def test_undecodable_or_odd_authorization_bytes_are_a_401_not_a_500(guarded: RunningServer) -> None:
    """A raw request: aiohttp's client would refuse to send these bytes."""
    host, port = guarded.url.removeprefix("http://").split(":")
    body = "aos_" + "a" * 12 + "_" + "b" * 30
    for value in (
        b"Bearer \xff\xfe",
        b"Bearer " + body.encode() + "é".encode() * 3,
        b"Bearer " + TOKEN.encode() + b"\xff",
    ):
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(
            b"GET /v1/sessions HTTP/1.1\r\nHost: "
            + host.encode()
            + b"\r\nConnection: close\r\nAuthorization: "
            + value
            + b"\r\n\r\n"
        )
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        assert answer.startswith(b"HTTP/1.1 401"), answer[:200]


async def test_keys_survive_a_restart_of_the_server(
    server_factory: Factory, mock: MockServer, http: aiohttp.ClientSession
) -> None:
    first = await server_factory(mock.url)  # open: its first key is made without any
    async with http.post(f"{first.url}/v1/admin/keys", json={"tenant_id": "default", "scopes": ["admin"]}) as r:
        key = (await r.json())["key"]
    await first.close()
    second = await server_factory(mock.url)  # same data dir, no token: the stored key closes it
    assert await _status(http, f"{second.url}/v1/sessions") == 401
    assert await _status(http, f"{second.url}/v1/admin/tenants", {"Authorization": f"Bearer {key}"}) == 200
