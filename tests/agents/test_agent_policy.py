"""What an API-defined agent may run: stdio MCP servers, URLs, tools and limits (docs/security.md).

The HTTP tests use the real app over loopback; the run tests a real RunService, SQLite journal
and a real MCP server process (tests/agents/mcp_server.py), over stdio and streamable HTTP.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import pytest

from agentos.agents.policy import AgentPolicy, check_agent
from agentos.agents.service import RunService
from agentos.config import Settings, settings_from_dict
from agentos.config.agents import parse_agent_spec
from agentos.errors import ConfigError, Forbidden, InvalidInput, NotFound
from agentos.mcp.checks import McpUnavailable
from agentos.mcp.tools import McpHub
from agentos.mock.server import MockServer
from agentos.testing import RunningServer, standalone_driver
from tests.agents.conftest import collect
from tests.agents.fakes import ScriptedProvider
from tests.agents.test_mcp_tools import SERVER, free_port, use_calc, wait_listening
from tests.api.helpers import expect_error, start_app

CALC = {"command": SERVER, "idempotent_tools": ["add"]}
SECURITY = {"api_mcp_servers": {"calc": CALC}, "max_command": {"timeout_s": 60}}


@pytest.fixture
async def served(tmp_path: Path, mock_factory: Callable[..., Awaitable[MockServer]]) -> AsyncIterator[RunningServer]:
    mock = await mock_factory()
    settings = settings_from_dict(
        {
            "data_dir": str(tmp_path / "data"),
            "provider": {"url": mock.url},
            "agents": {"admin_ops": {"tools": ["run_command"], "mcp_servers": [{"name": "calc", **CALC}]}},
            "security": SECURITY,
        }
    )
    server = await start_app(settings)
    yield server
    await server.close()


async def post_agent(http: aiohttp.ClientSession, served: RunningServer, body: Any) -> aiohttp.ClientResponse:
    async with http.post(f"{served.url}/v1/agents", json=body) as response:
        await response.read()
        return response


async def refused(http: aiohttp.ClientSession, served: RunningServer, body: Any, status: int, code: str) -> str:
    async with http.post(f"{served.url}/v1/agents", json=body) as response:
        error = await expect_error(response, status, code)
    async with http.get(f"{served.url}/v1/agents/{body['name']}") as response:
        assert response.status == 404, "a refused agent must not be stored"
    message: str = error["error"]["message"]
    return message


async def test_a_stdio_command_from_the_api_is_refused(served: RunningServer, http: aiohttp.ClientSession) -> None:
    for command in (["sh", "-c", "id > /tmp/pwned"], SERVER):  # the allowed server's argv under another name
        body = {"name": "x", "mcp_servers": [{"name": "evil", "command": command}]}
        message = await refused(http, served, body, 403, "stdio_mcp_not_allowed")
        assert "mcp_servers.0" in message and "security.api_mcp_servers" in message


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/mcp",
        "http://localhost/mcp",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::1]/",
        "http://2130706433/",
        "http://0x7f.1/",
        "http://[::ffff:127.0.0.1]/",
        "http://10.0.0.1/",
        "http://user@example.com/mcp",
        "file:///etc/passwd",
    ],
)
async def test_an_http_mcp_url_to_a_private_address_is_refused(
    served: RunningServer, http: aiohttp.ClientSession, url: str
) -> None:
    body = {"name": "x", "mcp_servers": [{"name": "web", "transport": "http", "url": url}]}
    status, code = (422, "invalid_input") if url.startswith("file:") else (403, "url_not_allowed")
    await refused(http, served, body, status, code)  # file: is not even an HTTP URL to the spec


async def test_an_api_agent_names_an_allowed_server(served: RunningServer, http: aiohttp.ClientSession) -> None:
    response = await post_agent(http, served, {"name": "adder", "tools": [], "mcp_servers": [{"name": "calc"}]})
    assert response.status == 201
    async with http.get(f"{served.url}/v1/agents/adder") as response:
        agent = await response.json()
    assert agent["mcp_servers"][0]["command"] == SERVER and agent["source"] == "api"
    # What GET shows can be sent back as it is: the administrator's own definition, in full.
    body = {k: v for k, v in agent.items() if k != "source"}
    assert (await post_agent(http, served, body)).status == 201
    message = await refused(
        http, served, {"name": "y", "mcp_servers": [{"name": "files"}]}, 403, "mcp_server_not_allowed"
    )
    assert "calc" in message


async def test_limits_over_the_administrators_maxima(served: RunningServer, http: aiohttp.ClientSession) -> None:
    message = await refused(http, served, {"name": "x", "command": {"timeout_s": 61}}, 422, "limit_exceeded")
    assert (
        message == "command.timeout_s: 61.0 is over the administrator's maximum security.max_command.timeout_s = 60.0"
    )
    for field, value in (("max_delegation_width", 17), ("max_delegation_depth", 5)):
        message = await refused(http, served, {"name": "x", field: value}, 422, "limit_exceeded")
        assert message.startswith(f"{field}: {value} is over") and f"security.{field} = " in message
    body = {"name": "ok", "command": {"timeout_s": 60, "memory_mb": 4096}, "max_delegation_width": 16}
    assert (await post_agent(http, served, body)).status == 201


async def test_the_readme_agent_is_allowed_by_default(served: RunningServer, http: aiohttp.ClientSession) -> None:
    body = {"name": "ops", "tools": ["run_command", "ask_human"], "approval_required": ["run_command"]}
    assert (await post_agent(http, served, body)).status == 201


# --- the policy itself, and the config keys ---


def policy(**security: Any) -> AgentPolicy:
    return AgentPolicy.from_settings(settings_from_dict({"security": security}))


def test_an_administrator_may_define_anything() -> None:
    spec = parse_agent_spec(
        {"name": "root", "mcp_servers": [{"name": "sh", "command": ["sh"]}], "command": {"timeout_s": 9999}}
    )
    check_agent(spec, AgentPolicy(), caller_is_admin=True)
    with pytest.raises(Forbidden):
        check_agent(spec, AgentPolicy(), caller_is_admin=False)


def test_tools_and_token_budget() -> None:
    narrow = policy(api_tools=["ask_human"], max_token_budget=1000)
    with pytest.raises(Forbidden, match="'run_command'") as caught:
        check_agent(
            parse_agent_spec({"name": "a", "tools": ["run_command"], "token_budget": 10}), narrow, caller_is_admin=False
        )
    assert caught.value.code == "tool_not_allowed"
    for budget in (0, 1001):  # 0 is unlimited: over any cap
        with pytest.raises(InvalidInput, match="security.max_token_budget = 1000"):
            check_agent(
                parse_agent_spec({"name": "a", "tools": [], "token_budget": budget}), narrow, caller_is_admin=False
            )
    check_agent(
        parse_agent_spec({"name": "a", "tools": ["ask_human"], "token_budget": 1000}), narrow, caller_is_admin=False
    )


@pytest.mark.parametrize(
    ("security", "key"),
    [
        ({"api_mcp_servers": {"calc": {"transport": "stdio"}}}, "security.api_mcp_servers.calc.command"),
        ({"api_mcp_servers": {"a__b": {"command": ["x"]}}}, "security.api_mcp_servers.a__b.name"),
        ({"api_mcp_servers": {"w": {"transport": "http", "url": "ftp://x"}}}, "security.api_mcp_servers.w.url"),
        ({"api_mcp_servers": {"calc": {"command": ["x"], "shell": True}}}, "security.api_mcp_servers.calc"),
        ({"api_tools": ["rm_rf"]}, "security.api_tools"),
        ({"outbound_allow_networks": ["localhost"]}, "security.outbound_allow_networks"),
        ({"max_command": {"timeout_s": 0}}, "security.max_command.timeout_s"),
    ],
)
def test_bad_security_settings_name_their_key(security: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        settings_from_dict({"security": security})


# --- runs: the allowed server is started, others never are ---


async def open_service(tmp_path: Path, provider: Any, security: dict[str, Any], **tree: Any) -> RunService:
    settings = settings_from_dict({"security": security, **tree})
    service = RunService(provider, tmp_path / "data", settings, driver=standalone_driver(settings))
    await service.start()
    return service


async def test_a_run_of_an_api_agent_uses_the_allowed_stdio_server(tmp_path: Path) -> None:
    service = await open_service(tmp_path, ScriptedProvider(use_calc), SECURITY)
    try:
        await service.create_agent("default", {"name": "adder", "tools": [], "mcp_servers": [{"name": "calc"}]})
        events = await collect(service, await service.start_run("default", "adder", "add 2 and 3"))
    finally:
        await service.close(drain_s=0)
    assert events[-1].type == "run.completed" and events[-1].data["result"] == "the sum is 5"


async def test_a_stored_agent_that_is_no_longer_allowed_is_not_loaded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An agent stored by an older version (or before `[security]` was narrowed) with a stdio
    command: after a restart it is gone, and its command never ran."""
    marker = tmp_path / "ran"
    evil = {"name": "evil", "tools": [], "mcp_servers": [{"name": "sh", "command": ["touch", str(marker)]}]}
    service = await open_service(tmp_path, ScriptedProvider(), {})
    await service.create_agent("default", {"name": "fine", "tools": []})
    await service.store.write(
        [service.journal.put_agent("default", "evil", msgspec.json.encode(evil).decode(), "api", 1)]
    )
    await service.close(drain_s=0)
    with caplog.at_level(logging.WARNING, logger="agentos.agents.agents"):
        service = await open_service(tmp_path, ScriptedProvider(), {})
    try:
        assert service.get_agent("default", "fine")["source"] == "api"
        with pytest.raises(NotFound):
            service.get_agent("default", "evil")
    finally:
        await service.close(drain_s=0)
    assert "agent 'evil' of tenant 'default' is not loaded: mcp_servers.0: a stdio server" in caplog.text
    assert not marker.exists()


async def test_the_hub_never_starts_a_stdio_server_an_administrator_did_not_define(tmp_path: Path) -> None:
    """Defence in depth, for a spec that reached a run some other way (a journal from before)."""
    marker = tmp_path / "ran"
    command = [sys.executable, "-c", f"open({str(marker)!r}, 'w')"]
    spec = parse_agent_spec({"name": "a", "tools": [], "mcp_servers": [{"name": "sh", "command": command}]})
    hub = McpHub()
    try:
        with pytest.raises(McpUnavailable, match="a stdio server an administrator did not define is never started"):
            await hub.schemas(spec)
        assert "stdio server" in await hub.call(spec, "sh__x", {})
    finally:
        await hub.close()
    assert not marker.exists()
    trusting = McpHub(trusted=spec.mcp_servers)  # the same spec from the config file does start
    try:
        with pytest.raises(McpUnavailable, match="the connection closed"):  # not an MCP server: it exits at once
            await trusting.schemas(spec)
    finally:
        await trusting.close()
    assert marker.exists()


@pytest.fixture
async def http_mcp(tmp_path: Path) -> AsyncIterator[str]:
    """The test MCP server over streamable HTTP on 127.0.0.1; yields its URL."""
    port = free_port()
    with (tmp_path / "mcp.log").open("wb") as out:
        proc = await asyncio.create_subprocess_exec(*SERVER, "--http", str(port), stdout=out, stderr=out)
    try:
        await wait_listening(port, proc)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        await proc.wait()


@pytest.mark.slow
async def test_loopback_http_mcp_config_agents_and_allowed_api_agents(tmp_path: Path, http_mcp: str) -> None:
    """A config agent reaches a loopback MCP server as written; an API agent only once the
    administrator allows 127.0.0.1, and then through the pinned client."""
    server = {"name": "calc", "transport": "http", "url": http_mcp}
    agents = {"cfg": {"tools": [], "mcp_servers": [server]}}
    service = await open_service(tmp_path, ScriptedProvider(use_calc), {}, agents=agents)
    try:
        events = await collect(service, await service.start_run("default", "cfg", "add 2 and 3"))
        assert events[-1].data.get("result") == "the sum is 5", events[-1]
        with pytest.raises(Forbidden, match="loopback"):
            await service.create_agent("default", {"name": "api", "tools": [], "mcp_servers": [server]})
    finally:
        await service.close(drain_s=0)
    allowed = {"outbound_allow_networks": ["127.0.0.1/32"]}
    service = await open_service(tmp_path / "2", ScriptedProvider(use_calc), allowed)
    try:
        await service.create_agent("default", {"name": "api", "tools": [], "mcp_servers": [server]})
        events = await collect(service, await service.start_run("default", "api", "add 2 and 3"))
        assert events[-1].data.get("result") == "the sum is 5", events[-1]
    finally:
        await service.close(drain_s=0)


def test_settings_default_allow_the_readme() -> None:
    spec = parse_agent_spec({"name": "ops", "tools": ["run_command", "ask_human"]})
    check_agent(spec, AgentPolicy.from_settings(Settings()), caller_is_admin=False)
