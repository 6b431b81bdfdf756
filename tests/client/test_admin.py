"""`AdminClient` against the real server on loopback: a tenant and its key, the key's budgets,
the tenant's identity providers set, used by an end user and removed, the memory figures."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentos.client import AdminClient, APIError, AsyncClient
from agentos.mock.server import MockServer
from agentos.testing import RunningServer
from tests.identity.idp import IdentityProvider, idp_fixture  # noqa: F401  (the fixture `idp`)
from tests.triggers.webhooks import serve

ADMIN = "admin-token"


@pytest.fixture
async def server(tmp_path: Path, mock: MockServer) -> AsyncIterator[RunningServer]:
    running = await serve(tmp_path / "data", mock, {}, server={"api_token": ADMIN}, identity={"allow_loopback": True})
    yield running
    await running.close()


async def test_keys_budgets_identity_providers_and_memory(server: RunningServer, idp: IdentityProvider) -> None:
    async with AdminClient(server.url, token=ADMIN) as admin:
        await admin.create_tenant("acme", name="Acme")
        made = await admin.create_key("acme", scopes=["sessions:read", "sessions:write"])
        budgeted = await admin.update_key(made["key_id"], budget_per_day=2.5)
        assert budgeted["budget_per_day"] == 2.5 and budgeted["budget_per_month"] == 0

        assert (await admin.get_issuers("acme"))["issuers"] == []
        provider = {"issuer": idp.issuer, "audience": idp.audience}
        (shown,) = (await admin.set_issuers("acme", [provider]))["issuers"]
        assert shown["issuer"] == idp.issuer
        token = idp.mint({"sub": "ada", "scope": "sessions:read sessions:write"})
        async with AsyncClient(server.url, token=token) as user:  # the tenant's end user, signed in
            session = await user.create_session()
            assert session.owner == "ada"
        await admin.delete_issuers("acme")
        async with AsyncClient(server.url, token=token) as user:
            with pytest.raises(APIError) as refused:
                await user.create_session()
            assert refused.value.status == 401
        with pytest.raises(APIError) as unknown:
            await admin.get_issuers("nobody")
        assert unknown.value.status == 404

        assert {"trim"} <= set(await admin.memory())
