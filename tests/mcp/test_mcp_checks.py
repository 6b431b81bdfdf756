"""An agent whose MCP servers cannot start on this host is refused where it is defined (issue
#14): the config file's at start-up, an API body with a 422, a stored one at load. The `mcp`
package is made absent the way Python itself allows (None in `sys.modules`: the import fails)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import pytest

from agentos.agents import RunService
from agentos.agents.policy import AgentPolicy
from agentos.config import Settings
from agentos.errors import ConfigError, InvalidInput
from agentos.mcp.checks import command_missing, mcp_missing
from agentos.testing import RunningServer, standalone_driver
from tests.agents.fakes import ScriptedProvider
from tests.api.helpers import expect_error

HTTP_SERVER = {"name": "web", "transport": "http", "url": "https://mcp.example.com/mcp"}
NOT_A_COMMAND = "agentos-no-such-mcp-server"
TOKEN = "admin-token-for-the-mcp-checks"


@pytest.fixture
def without_mcp(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)


def test_what_a_command_lacks(tmp_path: Path) -> None:
    assert command_missing(sys.executable) is None
    assert command_missing("sh") is None
    assert command_missing(NOT_A_COMMAND) == f"{NOT_A_COMMAND!r} is not found on PATH"
    assert command_missing(str(tmp_path / "nope")) == f"{str(tmp_path / 'nope')!r} does not exist (or is not a file)"
    (tmp_path / "plain").write_text("")
    assert command_missing(str(tmp_path / "plain")) == f"{str(tmp_path / 'plain')!r} is not executable"


def test_mcp_missing(without_mcp: None) -> None:
    assert mcp_missing() == "the `mcp` package is not installed; install it with pip install 'agentos[mcp]'"


def service(tmp_path: Path, agents: dict[str, Any], **security: Any) -> RunService:
    settings = Settings(agents=agents, security=msgspec.convert(security, type=type(Settings().security)))
    return RunService(ScriptedProvider(), tmp_path / "data", settings, driver=standalone_driver(settings))


def test_a_config_agent_without_the_mcp_package_stops_the_start(tmp_path: Path, without_mcp: None) -> None:
    with pytest.raises(ConfigError) as refused:
        service(tmp_path, {"ops": {"tools": [], "mcp_servers": [HTTP_SERVER]}})
    assert str(refused.value) == (
        "agents.ops.mcp_servers: the `mcp` package is not installed; install it with pip install 'agentos[mcp]'"
    )


def test_a_config_agent_whose_command_is_not_found_stops_the_start(tmp_path: Path) -> None:
    servers = [HTTP_SERVER, {"name": "fs", "command": [NOT_A_COMMAND, "--root", "/srv"]}]
    with pytest.raises(ConfigError) as refused:
        service(tmp_path, {"ops": {"tools": [], "mcp_servers": servers}})
    assert str(refused.value) == f"agents.ops.mcp_servers.1.command: {NOT_A_COMMAND!r} is not found on PATH"


def test_an_administrators_api_server_whose_command_is_not_found_stops_the_start() -> None:
    security = {"api_mcp_servers": {"files": {"command": [NOT_A_COMMAND]}}}
    settings = Settings(security=msgspec.convert(security, type=type(Settings().security)))
    with pytest.raises(ConfigError) as refused:
        AgentPolicy.from_settings(settings)
    assert str(refused.value) == f"security.api_mcp_servers.files.command: {NOT_A_COMMAND!r} is not found on PATH"


async def test_a_stored_agent_is_not_loaded_once_its_servers_cannot_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = service(tmp_path, {})
    await first.start()
    try:
        await first.create_agent("default", {"name": "web", "tools": [], "mcp_servers": [HTTP_SERVER]})
        with pytest.raises(InvalidInput) as refused:  # an administrator's stdio command, not found
            body = {"name": "fs", "tools": [], "mcp_servers": [{"name": "fs", "command": [NOT_A_COMMAND]}]}
            await first.create_agent("default", body, caller_is_admin=True)
        assert refused.value.code == "mcp_unavailable"
        assert refused.value.message == f"mcp_servers.0.command: {NOT_A_COMMAND!r} is not found on PATH"
    finally:
        await first.close()
    monkeypatch.setitem(sys.modules, "mcp", None)
    again = service(tmp_path, {})
    await again.start()
    try:
        assert not again.has_agent("default", "web")  # logged: "... the `mcp` package is not installed ..."
    finally:
        await again.close()


async def test_the_api_refuses_an_agent_whose_servers_cannot_start(
    server_factory: Any, mock: Any, http: aiohttp.ClientSession, without_mcp: None
) -> None:
    server: RunningServer = await server_factory(mock.url, **{"server.api_token": TOKEN})
    admin = {"Authorization": f"Bearer {TOKEN}"}
    body = {"name": "web", "tools": [], "mcp_servers": [HTTP_SERVER]}
    async with http.post(f"{server.url}/v1/agents", json=body, headers=admin) as response:
        error = await expect_error(response, 422, "mcp_unavailable")
    assert error["error"]["message"] == (
        "mcp_servers: the `mcp` package is not installed; install it with pip install 'agentos[mcp]'"
    )
    async with http.get(f"{server.url}/v1/agents/web", headers=admin) as response:
        await expect_error(response, 404, "agent_not_found")  # nothing was stored
