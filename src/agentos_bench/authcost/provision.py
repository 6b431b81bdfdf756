"""Tenants, keys and sessions for the auth-cost bench, made through the real API of a running server.

A target is what one measured request uses: its `Authorization` header ("" in open mode) and the
id of a session of that key's tenant. In B each key gets one session, made with that key, so
every read is of the reader's own tenant; in A the same number of sessions is made with no key.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import aiohttp

Target = tuple[str, str]  # (Authorization header value or "", session id)
_PARALLEL = 16  # setup requests in flight
T = TypeVar("T")


class ProvisionError(RuntimeError):
    """The server refused a setup request (the message carries its answer)."""


async def _post(http: aiohttp.ClientSession, url: str, body: dict[str, Any], auth: str) -> dict[str, Any]:
    headers = {"Authorization": auth} if auth else {}
    async with http.post(url, json=body, headers=headers) as response:
        if response.status != 201:
            raise ProvisionError(f"POST {url}: {response.status} {await response.text()}")
        answer: dict[str, Any] = await response.json()
        return answer


async def _bounded(calls: list[Callable[[], Awaitable[T]]]) -> list[T]:
    """Run `calls` with at most `_PARALLEL` in flight; results in order."""
    gate = asyncio.Semaphore(_PARALLEL)

    async def one(call: Callable[[], Awaitable[T]]) -> T:
        async with gate:
            return await call()

    return await asyncio.gather(*(one(c) for c in calls))


def _session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))


async def _sessions(http: aiohttp.ClientSession, base_url: str, auths: list[str]) -> list[Target]:
    url = f"{base_url}/v1/sessions"

    def make(auth: str) -> Callable[[], Awaitable[dict[str, Any]]]:
        return lambda: _post(http, url, {}, auth)

    made = await _bounded([make(a) for a in auths])
    return [(auth, str(m["id"])) for auth, m in zip(auths, made, strict=True)]


async def provision_open(base_url: str, sessions: int) -> list[Target]:
    """A: `sessions` sessions of the open principal (tenant "default")."""
    async with _session() as http:
        return await _sessions(http, base_url, [""] * sessions)


async def provision_keys(base_url: str, admin_token: str, tenants: int, keys_per_tenant: int) -> list[Target]:
    """B: `tenants` tenants (`bench-0000`, ...), `keys_per_tenant` keys each (every scope but
    admin), and one session per key, made with that key.

    Raises:
        ProvisionError: the server refused a request.
    """
    admin = f"Bearer {admin_token}"
    tenant_ids = [f"bench-{i:04d}" for i in range(tenants)]
    async with _session() as http:

        def tenant(tid: str) -> Callable[[], Awaitable[dict[str, Any]]]:
            return lambda: _post(http, f"{base_url}/v1/admin/tenants", {"tenant_id": tid, "name": tid}, admin)

        def key(tid: str) -> Callable[[], Awaitable[dict[str, Any]]]:
            return lambda: _post(http, f"{base_url}/v1/admin/keys", {"tenant_id": tid, "name": "bench"}, admin)

        await _bounded([tenant(t) for t in tenant_ids])
        made = await _bounded([key(t) for t in tenant_ids for _ in range(keys_per_tenant)])
        return await _sessions(http, base_url, [f"Bearer {m['key']}" for m in made])
