"""`agentos tenants|keys` against a real server, and the key bootstrap (`keys generate`,
`serve --api-token-file`, the non-loopback rule)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agentos.cli import main
from agentos.config import load_settings
from agentos.errors import ConfigError
from agentos.mock.server import MockServer
from agentos.server import check_bind
from agentos.services import open_tenants
from agentos.tenancy.keys import parse
from agentos.tenancy.principal import Scope
from agentos.testing import RunningServer
from agentos.testing.tenants import create_tenant_key
from tests.conftest import child_env

TOKEN = "cli-admin-token"
Factory = Callable[..., Awaitable[RunningServer]]


class Cli:
    """`agentos ...` run in a thread (it runs its own event loop), its output captured."""

    def __init__(self, capsys: pytest.CaptureFixture[str], url: str) -> None:
        self.capsys, self.url = capsys, url

    async def __call__(self, *args: str, url: bool = True) -> tuple[int, Any, str]:
        argv = [*args, "--url", self.url] if url else list(args)
        self.capsys.readouterr()
        code = await asyncio.to_thread(main, argv)
        out, err = self.capsys.readouterr()
        return code, json.loads(out) if out.strip().startswith(("{", "[")) else out, err


@pytest.fixture
async def server(server_factory: Factory, mock: MockServer) -> RunningServer:
    return await server_factory(mock.url, **{"server.api_token": TOKEN})


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], server: RunningServer, monkeypatch: pytest.MonkeyPatch) -> Cli:
    monkeypatch.setenv("AGENTOS_API_KEY", TOKEN)
    return Cli(capsys, server.url)


async def test_tenants_and_keys_end_to_end(cli: Cli, server: RunningServer, http: aiohttp.ClientSession) -> None:
    code, made, _ = await cli("tenants", "create", "acme", "--name", "Acme", "--limit", "weight=3")
    assert code == 0 and made["tenant_id"] == "acme" and made["limit_overrides"] == {"weight": 3}
    code, listed, _ = await cli("tenants", "list")
    assert code == 0 and [t["tenant_id"] for t in listed["data"]] == ["acme", "default"]
    code, changed, _ = await cli("tenants", "update", "acme", "--limit", "max_sessions=4", "--clear-limit", "weight")
    assert code == 0 and changed["limit_overrides"] == {"max_sessions": 4}
    code, key, _ = await cli("keys", "create", "--tenant", "acme", "--scope", "sessions:read", "--name", "ci")
    assert code == 0 and key["scopes"] == ["sessions:read"] and parse(key["key"]).key_id == key["key_id"]
    auth = {"Authorization": f"Bearer {key['key']}"}
    async with http.get(f"{server.url}/v1/sessions", headers=auth) as r:
        assert r.status == 200
    code, keys, _ = await cli("keys", "list", "--tenant", "acme")
    assert code == 0 and [k["key_id"] for k in keys["data"]] == [key["key_id"]] and key["key"] not in json.dumps(keys)
    assert (await cli("keys", "show", key["key_id"]))[1]["status"] == "active"
    code, shown, _ = await cli("tenants", "disable", "acme")
    assert code == 0 and shown["disabled"] is True
    async with http.get(f"{server.url}/v1/sessions", headers=auth) as r:
        assert r.status == 401
    assert (await cli("tenants", "enable", "acme"))[1]["disabled"] is False
    code, revoked, _ = await cli("keys", "revoke", key["key_id"])
    assert code == 0 and revoked["status"] == "revoked"
    async with http.get(f"{server.url}/v1/sessions", headers=auth) as r:
        assert r.status == 401
    assert (await cli("tenants", "show", "acme"))[1]["name"] == "Acme"


async def test_clear_one_line_errors_and_exit_codes(
    cli: Cli, server: RunningServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, unused_tcp_port: int
) -> None:
    code, _, err = await cli("tenants", "show", "nobody")
    assert code == 1 and err.strip() == "agentos: 404 tenant_not_found: tenant 'nobody' not found"
    for bad in ("weight", "weight=²", "weight=" + "9" * 41):
        code, _, err = await cli("tenants", "create", "acme", "--limit", bad)
        assert code == 2 and "--limit" in err, (bad, err)
    code, _, err = await cli("tenants", "create", "acme", "--limit", f"tokens_per_day={2**63}")
    assert code == 1 and "422 invalid_input: limits.tokens_per_day: at most 1000000000000" in err, err
    tenant = await create_tenant_key(server.url, TOKEN)
    key_file = tmp_path / "key"
    key_file.write_text(tenant.key + "\n")
    code, _, err = await cli("keys", "list", "--key-file", str(key_file))
    assert code == 1 and "403 insufficient_scope" in err and "admin scope" in err and len(err.splitlines()) == 1
    code, _, err = await cli("keys", "list", "--key-file", str(tmp_path / "missing"))
    assert code == 2 and "--key-file" in err
    monkeypatch.delenv("AGENTOS_API_KEY")
    code, _, err = await cli("tenants", "list")
    assert code == 1 and "401 unauthorized" in err and "AGENTOS_API_KEY" in err
    code, _, err = await cli("tenants", "list", "--url", f"http://127.0.0.1:{unused_tcp_port}", url=False)
    assert code == 3 and "cannot reach the server" in err and len(err.splitlines()) == 1
    for secret in (TOKEN, tenant.key):
        assert secret not in err


async def test_keys_generate_prints_a_fresh_well_formed_key(cli: Cli) -> None:
    first, second = [(await cli("keys", "generate", url=False))[1].strip() for _ in range(2)]
    assert parse(first) != parse(second)


async def test_a_non_loopback_bind_needs_a_token_or_a_usable_stored_key(tmp_path: Path) -> None:
    settings = load_settings(None, environ={}, overrides={"data_dir": str(tmp_path), "server.host": "0.0.0.0"})
    with pytest.raises(ConfigError, match="refusing to listen on '0.0.0.0' without API keys"):
        check_bind(settings)
    registry = await open_tenants(settings)
    _, record = await registry.create_key("default", scopes=[Scope.ADMIN])
    await registry.close()
    check_bind(settings)  # a usable key on disk: the bind is guarded
    registry = await open_tenants(settings)
    await registry.revoke_key(record.key_id)
    await registry.close()
    with pytest.raises(ConfigError):
        check_bind(settings)
    off = load_settings(None, environ={}, overrides={"server.host": "10.1.2.3", "server.api_token": "t"})
    check_bind(off)


def test_a_missing_token_file_stops_serve_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--api-token-file", str(tmp_path / "nope"), "--data-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("agentos: --api-token-file: cannot read") and len(err.splitlines()) == 1


@pytest.mark.slow
async def test_serve_takes_its_token_from_a_file_and_never_logs_a_key(
    tmp_path: Path, mock: MockServer, http: aiohttp.ClientSession
) -> None:
    token = (await asyncio.to_thread(main_output, ["keys", "generate"])).strip()
    token_file = tmp_path / "token"
    token_file.write_text(token)
    proc = await asyncio.create_subprocess_exec(
        *[sys.executable, "-m", "agentos", "serve", "--port", "0", "--log-level", "debug"],
        *["--data-dir", str(tmp_path / "data"), "--provider-url", mock.url, "--api-token-file", str(token_file)],
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=child_env(),
    )
    assert proc.stdout is not None
    try:
        line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
        url = line.split()[-1]
        async with http.get(f"{url}/v1/sessions") as r:
            assert r.status == 401
        admin = {"Authorization": f"Bearer {token}"}
        async with http.post(f"{url}/v1/admin/keys", json={"tenant_id": "default"}, headers=admin) as r:
            made = await r.json()
        for auth in (admin, {"Authorization": f"Bearer {made['key']}"}):
            async with http.get(f"{url}/v1/sessions", headers=auth) as r:
                assert r.status == 200
        proc.send_signal(signal.SIGTERM)
        out, err = await asyncio.wait_for(proc.communicate(), 30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    logged = line.encode() + out + err
    assert b"stopped" in err  # the log was captured: it is where a leaked key would be
    for secret in (token, made["key"], parse(made["key"]).secret):
        assert secret.encode() not in logged


def main_output(argv: list[str]) -> str:
    """`agentos ...` in this process, its standard output returned (for a thread: no capsys)."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main(argv) == 0
    return buffer.getvalue()
