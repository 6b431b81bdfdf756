"""The fixture of a load run, created through the API before it and removed after it.

A tenant of its own (`bench-load-<hex>`), a key of that tenant (held in memory only: never
written to disk, never printed), an agent, a collection with a few ready documents (so
`rag_query` finds something), and a trigger that starts the agent's runs. Created with an admin
key, then everything else acts as the tenant. Removal: the trigger, the collection, the key
(revoked), the tenant (disabled; tenants are never deleted, their rows belong to the access log).

`preflight` refuses a run that could not do its work: the server not ready, the mock not
answering, or a fixture step refused. A run that measured a deployment unable to do the work
would read as a result.
"""

from __future__ import annotations

import secrets
from typing import Any

import aiohttp

from agentos_bench.arrival.loads import Fixture, text_of
from agentos_bench.arrival.webhook import secret_bytes
from agentos_bench.knowledge.client import BenchHTTPError, create_collection, ingest
from agentos_bench.knowledge.corpus import Document

AGENT = "load"
COLLECTION = "load"
DIMENSIONS = 64
SEED_DOCUMENTS = 20
_READY_TIMEOUT_S = 60.0


class PreflightError(RuntimeError):
    """The run cannot start: what is missing, in one line."""


async def preflight(http: aiohttp.ClientSession, server_urls: tuple[str, ...], mock_url: str | None) -> None:
    """Every node is ready and the mock answers (models list) when its URL is known."""
    checks = [("server", f"{url}/readyz") for url in server_urls]
    if mock_url is not None:
        checks.append(("mock provider", f"{mock_url}/models"))
    for name, url in checks:
        try:
            async with http.get(url, timeout=aiohttp.ClientTimeout(total=5)) as response:
                if response.status != 200:
                    raise PreflightError(f"the {name} at {url} answered {response.status}")
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise PreflightError(f"the {name} at {url} does not answer ({type(exc).__name__})") from None


async def create_fixture(admin: aiohttp.ClientSession, url: str) -> Fixture:
    """Raises: PreflightError naming the step the server refused."""
    tenant_id = f"bench-load-{secrets.token_hex(4)}"
    await _call(admin, "POST", f"{url}/v1/admin/tenants", {"tenant_id": tenant_id, "name": "agentos bench load"})
    created = await _call(admin, "POST", f"{url}/v1/admin/keys", {"tenant_id": tenant_id, "name": "bench-load"})
    key = str(created["key"])
    fixture = Fixture(
        url=url,
        key=key,
        agent=AGENT,
        collection=COLLECTION,
        trigger_id="",
        trigger_secret=b"",
        tenant_id=tenant_id,
        key_id=str(created["key_id"]),
    )
    async with aiohttp.ClientSession(headers=fixture.headers) as tenant:
        await _call(tenant, "POST", f"{url}/v1/agents", {"name": AGENT})
        try:
            await create_collection(tenant, url, COLLECTION, DIMENSIONS, 200, 20)
            documents = [Document(i, f"seed {i}", text_of(i, 200), "seed") for i in range(SEED_DOCUMENTS)]
            await ingest(tenant, url, COLLECTION, documents, 4, _READY_TIMEOUT_S)
        except (BenchHTTPError, TimeoutError) as exc:
            raise PreflightError(f"the collection could not be filled: {exc or 'not ready in time'}") from None
        trigger = await _call(tenant, "POST", f"{url}/v1/triggers", {"agent": AGENT, "input_template": "{payload}"})
    fixture.trigger_id = str(trigger["trigger_id"])
    fixture.trigger_secret = secret_bytes(str(trigger["secret"]))
    return fixture


async def remove_fixture(admin: aiohttp.ClientSession, fixture: Fixture) -> list[str]:
    """Undo `create_fixture`, each step tried even if one before it failed; what failed."""
    failed: list[str] = []
    async with aiohttp.ClientSession(headers=fixture.headers) as tenant:
        steps = [
            (tenant, "DELETE", f"/v1/triggers/{fixture.trigger_id}", None),
            (tenant, "DELETE", f"/v1/collections/{fixture.collection}", None),
            (admin, "POST", f"/v1/admin/keys/{fixture.key_id}/revoke", None),
            (admin, "PATCH", f"/v1/admin/tenants/{fixture.tenant_id}", {"disabled": True}),
        ]
        for http, method, path, body in steps:
            if "//" in path or path.endswith("/"):
                continue  # a step whose resource was never created
            try:
                await _call(http, method, fixture.url + path, body)
            except PreflightError as exc:
                failed.append(str(exc))
    return failed


async def _call(http: aiohttp.ClientSession, method: str, url: str, body: dict[str, Any] | None) -> Any:
    try:
        async with http.request(method, url, json=body, timeout=aiohttp.ClientTimeout(total=30)) as response:
            data = await response.json(content_type=None) if response.status != 204 else None
            if response.status >= 300:
                raise PreflightError(f"{method} {response.url.path}: {response.status} {data}")
            return data
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise PreflightError(f"{method} {url}: {type(exc).__name__}") from None
