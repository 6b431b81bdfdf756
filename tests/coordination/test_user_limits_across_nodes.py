"""An end user's own limits over two real servers (separate data dirs, one Redis): alice's
`user_turns_per_minute`, `user_runs_per_minute` and `user_max_concurrent_turns` are the
cluster's, not each node's (issue 30), as the tenant's are (`test_two_nodes.py`); bob's are his own.

Users sign in with tokens of the real loopback OIDC provider (`tests.identity.idp`), which both
nodes trust. The rate limits run on Redis's clock: each test is over in well under an interval.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agentos.api.cluster_limits import ClusterLimiters
from agentos.api.ratelimit import LIMITERS
from agentos.config import settings_from_dict
from agentos.mock.server import MockServer
from agentos.testing import RunningServer, eventually, start_server
from tests.api.helpers import expect_error
from tests.conftest import REDIS_URL
from tests.identity.idp import IdentityProvider, idp_fixture  # noqa: F401  (the fixture `idp`)
from tests.identity.test_user_tokens import new_session, started_turn

TENANT = "acme"
SCOPES = "sessions:read sessions:write runs:read runs:write"
HI = {"input": "hi"}
Nodes = Callable[..., Awaitable[list[RunningServer]]]


@pytest.fixture
async def nodes(
    tmp_path: Path, mock_factory: Callable[..., Awaitable[MockServer]], prefix: str, idp: IdentityProvider
) -> AsyncIterator[Nodes]:
    started: list[RunningServer] = []

    async def make(ttft_ms: int = 5, **limits: int) -> list[RunningServer]:
        mock = await mock_factory(ttft_ms=ttft_ms)
        for name in ("a", "b"):
            tree: dict[str, Any] = {
                "data_dir": str(tmp_path / name),
                "provider": {"url": mock.url, "retry_budget_s": 2.0},
                "tenant_limits": limits,
                "coordination": {"redis_url": REDIS_URL, "key_prefix": prefix},
                "identity": {"issuers": [{"tenant": TENANT, "issuer": idp.issuer, "audience": idp.audience}]}
                | {"allow_loopback": True},
                "agents": {"echo": {"tools": []}},
            }
            node = await start_server(settings_from_dict(tree))
            started.append(node)
            await node.services.tenants.create_tenant(TENANT)  # each node's own tenants.db
        return started[-2:]

    yield make
    for server in started:
        await server.close()


def user(idp: IdentityProvider, sub: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {idp.mint({'sub': sub, 'scope': SCOPES})}"}


async def turn(http: aiohttp.ClientSession, node: RunningServer, headers: dict[str, str]) -> aiohttp.ClientResponse:
    """A turn on a new session of the user's on `node`, read to its end."""
    async with http.post(f"{node.url}/v1/sessions", json={}, headers=headers) as r:
        assert r.status == 201, await r.text()
        session_id = (await r.json())["id"]
    async with http.post(f"{node.url}/v1/sessions/{session_id}/turns", json=HI, headers=headers) as r:
        await r.read()
        return r


async def test_a_users_turns_per_minute_are_counted_across_nodes(
    nodes: Nodes, idp: IdentityProvider, http: aiohttp.ClientSession
) -> None:
    a, b = await nodes(user_turns_per_minute=2)
    alice, bob = user(idp, "alice"), user(idp, "bob")
    for node in (a, b):
        assert (await turn(http, node, alice)).status == 200
    refused = await turn(http, a, alice)  # two turns started, one on each node
    await expect_error(refused, 429, "turn_rate_limited")
    assert 29 <= int(refused.headers["Retry-After"]) <= 30
    assert (await turn(http, b, bob)).status == 200  # bob's own bucket


async def test_a_users_runs_per_minute_are_counted_across_nodes(
    nodes: Nodes, idp: IdentityProvider, http: aiohttp.ClientSession
) -> None:
    a, b = await nodes(user_runs_per_minute=1)
    alice, bob = user(idp, "alice"), user(idp, "bob")
    async with http.post(f"{a.url}/v1/agents/echo/runs", json=HI, headers=alice) as r:
        assert r.status == 202, await r.text()
    async with http.post(f"{b.url}/v1/agents/echo/runs", json=HI, headers=alice) as r:
        body = await expect_error(r, 429, "run_rate_limited")
    assert "user's 1 runs per minute" in body["error"]["message"]
    async with http.post(f"{b.url}/v1/agents/echo/runs", json=HI, headers=bob) as r:
        assert r.status == 202, await r.text()


async def test_a_users_failed_start_gives_the_unit_back_cluster_wide(
    nodes: Nodes, idp: IdentityProvider, http: aiohttp.ClientSession
) -> None:
    a, b = await nodes(user_turns_per_minute=1)
    alice = user(idp, "alice")
    async with http.post(f"{a.url}/v1/sessions/missing/turns", json=HI, headers=alice) as r:
        await expect_error(r, 404)  # no such session: the unit is given back, in the background
    limiters = a.app[LIMITERS]
    assert isinstance(limiters, ClusterLimiters)
    await limiters.flush()
    assert (await turn(http, b, alice)).status == 200  # the one unit of the minute, still there
    await expect_error(await turn(http, a, alice), 429, "turn_rate_limited")


async def test_a_users_concurrent_turns_are_counted_across_nodes(
    nodes: Nodes, idp: IdentityProvider, http: aiohttp.ClientSession
) -> None:
    """`user_max_concurrent_turns = 1`: while alice's turn runs on node a (a slow provider), her
    turn on node b is a 429 `user_concurrent_turns`; bob's on b is not; once hers has ended and
    its place is given back in Redis, she may on b."""
    a, b = await nodes(ttft_ms=30_000, user_max_concurrent_turns=1)
    alice, bob = user(idp, "alice"), user(idp, "bob")
    on_a, on_b = await new_session(http, a, alice), await new_session(http, b, alice)
    bobs = await new_session(http, b, bob)
    async with started_turn(http, a, alice, on_a):
        async with http.post(f"{b.url}/v1/sessions/{on_b}/turns", headers=alice, json=HI) as r:
            await expect_error(r, 429, "user_concurrent_turns")
            assert int(r.headers["Retry-After"]) >= 1
        async with started_turn(http, b, bob, bobs):
            pass  # bob's place is his own
    holds = a.services.driver.user_turn_holds
    assert holds is not None

    async def given_back() -> bool:  # the release goes to Redis in the background
        return await holds.count(f"{TENANT}:alice") == 0

    await eventually(given_back, timeout_s=10, what="alice's place given back in Redis")
    async with started_turn(http, b, alice, on_b):
        pass
