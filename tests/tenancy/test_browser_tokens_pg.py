"""Browser tokens across the nodes of a cluster: two registries on one PostgreSQL schema, as two
nodes have them. A token minted on one node is verified on the other (the signing keys derive
from the pepper they share, with nothing stored), and revoking its parent key on either node
refuses it on both, once the revocation has travelled (LISTEN/NOTIFY; `eventually`, bounded).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from agentos.config import StoreConfig
from agentos.tenancy.browser_tokens import BrowserTokens, Grant
from agentos.tenancy.principal import Principal, Scope, Via
from agentos.tenancy.registry import Refused, TenantRegistry
from agentos.tenancy.signing import SigningKeys
from agentos.testing import eventually

asyncpg = pytest.importorskip("asyncpg")

PEPPER = b"p" * 32
PROPAGATION_S = 1.0  # docs/deployment.md's bound while the LISTEN connection is up
Node = Callable[[], Awaitable[tuple[BrowserTokens, TenantRegistry]]]


@pytest.fixture
async def node(pg: StoreConfig) -> AsyncIterator[Node]:
    from agentos.tenancy.pg_tables import PgTenantTables

    opened: list[TenantRegistry] = []

    async def start() -> tuple[BrowserTokens, TenantRegistry]:
        registry = TenantRegistry(PgTenantTables(pg, PEPPER), PEPPER)
        await registry.open()
        opened.append(registry)
        return BrowserTokens(SigningKeys(PEPPER, now_ms=registry.now_ms), registry), registry

    yield start
    for registry in reversed(opened):
        await registry.close()


async def test_a_token_minted_on_one_node_is_verified_on_the_other_until_its_key_is_revoked(node: Node) -> None:
    (a, registry_a), (b, _) = await node(), await node()
    _, record = await registry_a.create_key("default", scopes=[Scope.SESSIONS_READ, Scope.RUNS_WRITE])
    grant = Grant(
        "default", record.key_id, frozenset({Scope.SESSIONS_READ}), frozenset({("session", "ses_1")}), "alice"
    )
    token = a.mint(grant).token

    await eventually(lambda: isinstance(b.authenticate(token), Principal), PROPAGATION_S, "the parent key on b")
    found = b.authenticate(token)
    assert isinstance(found, Principal)
    assert (found.tenant_id, found.key_id, found.subject, found.via) == ("default", record.key_id, "alice", Via.BROWSER)
    assert found.scopes == {Scope.SESSIONS_READ} and found.resources == frozenset({("session", "ses_1")})

    await registry_a.revoke_key(record.key_id)
    assert a.authenticate(token) == Refused(record.key_id, "the parent key was revoked or has expired")
    await eventually(lambda: isinstance(b.authenticate(token), Refused), PROPAGATION_S, "the revocation on b")
