"""Tenants and keys for integration tests, made through the real admin API of a running server.

Usage::

    server = await server_factory(mock.url, **{"server.api_token": "admin-token"})
    alice = await create_tenant_key(server.url, "admin-token", scopes=["sessions:read", "sessions:write"])
    async with http.get(f"{server.url}/v1/sessions", headers=alice.headers) as r: ...
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import aiohttp


@dataclass(frozen=True)
class TenantKey:
    """A key made for a test: `key` is the bearer secret, shown once by the server."""

    tenant_id: str
    key_id: str
    key: str
    scopes: tuple[str, ...]

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def __repr__(self) -> str:
        return f"TenantKey(tenant_id={self.tenant_id!r}, key_id={self.key_id!r}, scopes={self.scopes!r})"


async def create_tenant_key(
    base_url: str,
    admin_token: str,
    *,
    tenant_id: str | None = None,
    scopes: Iterable[str] | None = None,
    name: str = "test",
    limits: Mapping[str, float] | None = None,  # counts and budgets (a budget may be fractional)
    expires_in_s: int | None = None,
) -> TenantKey:
    """Create tenant `tenant_id` (random when None; reused if it exists, `limits` then ignored)
    and a key of it with `scopes` (None: every scope but admin), via POST /v1/admin/tenants and
    POST /v1/admin/keys with `admin_token` (the server's `server.api_token`, or an admin key).

    Raises:
        AssertionError: the server refused (the message carries its answer).
    """
    tenant_id = tenant_id or f"t-{secrets.token_hex(4)}"
    auth = {"Authorization": f"Bearer {admin_token}"}
    async with aiohttp.ClientSession(headers=auth, timeout=aiohttp.ClientTimeout(total=30)) as http:
        body = {"tenant_id": tenant_id, "name": name, "limits": dict(limits or {})}
        async with http.post(f"{base_url}/v1/admin/tenants", json=body) as r:
            assert r.status in (201, 409), f"creating tenant {tenant_id!r}: {r.status} {await r.text()}"
        key_body: dict[str, object] = {"tenant_id": tenant_id, "name": name}
        if scopes is not None:
            key_body["scopes"] = list(scopes)
        if expires_in_s is not None:
            key_body["expires_in_s"] = expires_in_s
        async with http.post(f"{base_url}/v1/admin/keys", json=key_body) as r:
            assert r.status == 201, f"creating a key of {tenant_id!r}: {r.status} {await r.text()}"
            made = await r.json()
    return TenantKey(tenant_id, made["key_id"], made["key"], tuple(made["scopes"]))
