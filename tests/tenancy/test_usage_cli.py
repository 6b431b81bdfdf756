"""`agentos usage` against a real server (loopback port, real SQLite files): a table by default,
the server's JSON with --json, a tenant's key sees its own tenant, an admin key picks one, and
a bad --group-by is the server's 422 on stderr with exit status 1."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from agentos.mock.server import MockServer
from agentos.providers.base import CallContext, Usage
from agentos.providers.metering import Spend
from agentos.store.ledger import DAY_MS
from agentos.testing import RunningServer
from agentos.testing.tenants import create_tenant_key
from tests.tenancy.test_cli import TOKEN, Cli

Factory = Callable[..., Awaitable[RunningServer]]
DAY0 = 20_000 * DAY_MS  # 2024-10-04
RANGE = ("--from", "2024-10-01", "--to", "2024-10-31")


@pytest.fixture
async def server(server_factory: Factory, mock: MockServer) -> RunningServer:
    running = await server_factory(mock.url, **{"server.api_token": TOKEN})
    for n, (tenant, target, cost) in enumerate(
        [("acme", "p/big", 0.5), ("acme", "p/free", None), ("bravo", "p/big", 2.0)]
    ):
        who = CallContext(tenant_id=tenant, key_id="k", session_id=f"s{n}")
        usage = Usage(prompt_tokens=1000 * (n + 1), completion_tokens=10)
        running.services.ledger.record(Spend(who, "m", target, usage, cost, DAY0 + n * DAY_MS))
    return running


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], server: RunningServer, monkeypatch: pytest.MonkeyPatch) -> Cli:
    monkeypatch.setenv("AGENTOS_API_KEY", TOKEN)
    return Cli(capsys, server.url)


async def test_a_table_by_target_and_day(cli: Cli) -> None:
    code, out, _ = await cli("usage", "--group-by", "tenant,target,day", *RANGE)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == [
        "tenant",
        "target",
        "day",
        "calls",
        "prompt",
        "completion",
        "cache_read",
        "cache_write",
        "cost",
        "unpriced",
    ]
    assert lines[1].split() == ["acme", "p/big", "2024-10-04", "1", "1000", "10", "0", "0", "0.500000", "0"]
    assert lines[2].split() == ["acme", "p/free", "2024-10-05", "1", "2000", "10", "0", "0", "-", "1"]
    assert lines[3].split()[:2] == ["bravo", "p/big"]
    assert lines[4] == "3 rows; every tenant; 2024-10-01 to 2024-10-31 (UTC)"
    assert "without a price" in lines[5]


async def test_json_and_one_tenant(cli: Cli) -> None:
    code, report, _ = await cli("usage", "--tenant", "acme", "--group-by", "target", "--json", *RANGE)
    assert code == 0 and report["tenant"] == "acme"
    assert [(t["target"], t["cost"], t["unpriced_calls"]) for t in report["data"]] == [
        ("p/big", 0.5, 0),
        ("p/free", None, 1),
    ]


async def test_a_tenant_key_sees_its_own(cli: Cli, server: RunningServer, monkeypatch: pytest.MonkeyPatch) -> None:
    bravo = await create_tenant_key(server.url, TOKEN, tenant_id="bravo", scopes=["sessions:read"])
    monkeypatch.setenv("AGENTOS_API_KEY", bravo.key)
    code, report, _ = await cli("usage", "--json", "--group-by", "tenant", *RANGE)
    assert code == 0 and [(t["tenant"], t["cost"]) for t in report["data"]] == [("bravo", 2.0)]
    code, _, err = await cli("usage", "--tenant", "acme", *RANGE)
    assert code == 1 and "403 insufficient_scope" in err


async def test_a_bad_group_is_the_servers_422(cli: Cli) -> None:
    code, out, err = await cli("usage", "--group-by", "model,colour")
    assert code == 1 and out == "" and "422 invalid_input" in err and "'colour'" in err
