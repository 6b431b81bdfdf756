"""Tenant API keys for the bench, made through the server's admin API (`/v1/admin/...`).

The bench starts each keyed server with a random admin token (`AGENTOS_API_TOKEN`, never
written anywhere but the child's environment) and makes one tenant and one key per bench tenant.
"""

from __future__ import annotations

import secrets

import aiohttp


class AdminKeys:
    """`await keys(http, base_url, "A")` -> a new key of tenant `bench-a` on that server; with
    `idp_url`, an end user's token for that tenant instead, from the bench's identity provider
    (`bench/scripts/bench_idp.py`, named by the server's profile under `[identity]`)."""

    def __init__(self, admin_token: str | None = None, *, idp_url: str = "") -> None:
        self.admin_token = admin_token or secrets.token_urlsafe(24)
        self.idp_url = idp_url.rstrip("/")

    @property
    def env(self) -> dict[str, str]:
        """What the server's environment needs for these keys to be made."""
        return {"AGENTOS_API_TOKEN": self.admin_token}

    async def __call__(self, http: aiohttp.ClientSession, base_url: str, tenant: str) -> str:
        """Raises: RuntimeError (the server refused; the message has its answer)."""
        auth = {"Authorization": f"Bearer {self.admin_token}"}
        tenant_id = f"bench-{tenant.lower()}"
        async with http.post(f"{base_url}/v1/admin/tenants", json={"tenant_id": tenant_id}, headers=auth) as r:
            if r.status not in (201, 409):
                raise RuntimeError(f"creating tenant {tenant_id!r}: {r.status} {await r.text()}")
        if self.idp_url:  # a user of the tenant, signed in: one token for all of its requests
            mint = {"tenant": tenant_id, "sub": f"user-of-{tenant_id}"}
            async with http.get(f"{self.idp_url}/mint", params=mint) as r:
                if r.status != 200:
                    raise RuntimeError(f"a token for {tenant_id!r} from {self.idp_url}: {r.status} {await r.text()}")
                token: str = (await r.json())["token"]
                return token
        async with http.post(f"{base_url}/v1/admin/keys", json={"tenant_id": tenant_id}, headers=auth) as r:
            if r.status != 201:
                raise RuntimeError(f"creating a key of {tenant_id!r}: {r.status} {await r.text()}")
            key: str = (await r.json())["key"]
        return key
