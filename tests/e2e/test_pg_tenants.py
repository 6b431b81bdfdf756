"""Two real `agentos serve` processes on one PostgreSQL schema (two nodes behind a load
balancer): a key made through one node's admin API works on the other, its revocation there
takes effect within the documented bound, and a node with another key pepper refuses to start.

Real processes, real PostgreSQL (a fresh schema, tests/postgres.py), the real mock provider.
The change travels from one process through the database to the other: `eventually` waits.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path

import aiohttp
import pytest

from agentos.config import StoreConfig
from agentos.mock.server import MockServer
from agentos.testing import eventually
from tests.e2e.test_process import agentos_process
from tests.e2e.test_startup_checks import serve_refused

pytest.importorskip("asyncpg")
pytestmark = pytest.mark.slow

ADMIN = "aos-e2e-admin-token"
PEPPER = "e2e-pepper-shared-by-every-node-0123456789"
PROPAGATION_S = 1.0  # docs/deployment.md: a change reaches every node within about a second


def node_env(pg: StoreConfig, pepper: str = PEPPER) -> dict[str, str]:
    return {
        "AGENTOS_STORE_BACKEND": "postgres",
        "AGENTOS_POSTGRES_URL": pg.postgres_url,
        "AGENTOS_STORE_POSTGRES_SCHEMA": pg.postgres_schema,
        "AGENTOS_API_TOKEN": ADMIN,
        "AGENTOS_SECURITY_KEY_PEPPER": pepper,
    }


async def status(http: aiohttp.ClientSession, url: str, key: str) -> int:
    async with http.get(f"{url}/v1/sessions", headers={"Authorization": f"Bearer {key}"}) as r:
        return r.status


async def test_a_key_made_on_node_a_works_on_node_b_until_revoked_on_a(
    tmp_path: Path, mock: MockServer, pg: StoreConfig, http: aiohttp.ClientSession
) -> None:
    admin = {"Authorization": f"Bearer {ADMIN}"}
    async with AsyncExitStack() as nodes:
        urls = []
        for name in ("a", "b"):
            args = ("--data-dir", str(tmp_path / name), "--provider-url", mock.url)
            _, url = await nodes.enter_async_context(agentos_process(*args, env=node_env(pg)))
            urls.append(url)
        a, b = urls
        async with http.post(f"{a}/v1/admin/tenants", json={"tenant_id": "acme"}, headers=admin) as r:
            assert r.status == 201, await r.text()
        body = {"tenant_id": "acme", "scopes": ["sessions:read"]}
        async with http.post(f"{a}/v1/admin/keys", json=body, headers=admin) as r:
            assert r.status == 201, await r.text()
            made = await r.json()
        assert await status(http, a, made["key"]) == 200

        async def works_on_b() -> bool:
            return await status(http, b, made["key"]) == 200

        await eventually(works_on_b, PROPAGATION_S, "the key made on a to work on b")
        async with http.post(f"{a}/v1/admin/keys/{made['key_id']}/revoke", headers=admin) as r:
            assert r.status == 200, await r.text()

        async def refused_on_b() -> bool:
            return await status(http, b, made["key"]) == 401

        await eventually(refused_on_b, PROPAGATION_S, "the key revoked on a to be refused on b")
        async with http.get(f"{b}/v1/admin/keys/{made['key_id']}", headers=admin) as r:
            assert (await r.json())["status"] == "revoked"


async def test_a_node_with_another_pepper_refuses_to_start_in_one_line(
    tmp_path: Path, mock: MockServer, pg: StoreConfig
) -> None:
    args = ("--data-dir", str(tmp_path / "a"), "--provider-url", mock.url)
    async with agentos_process(*args, env=node_env(pg)):
        line = await serve_refused(
            "--port",
            "0",
            "--data-dir",
            str(tmp_path / "b"),
            "--provider-url",
            mock.url,
            env=node_env(pg, pepper="another-pepper-of-the-same-length-0123456"),
        )
    assert line.startswith("agentos: security.key_pepper: this node's key pepper is not the one the keys in ")
    assert "another-pepper" not in line and PEPPER not in line
