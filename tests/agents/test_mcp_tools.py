"""MCP tools through the official client, against a real MCP server process."""

from __future__ import annotations

import asyncio
import socket
import sys
from pathlib import Path

import msgspec
import pytest

from agentos.config import KernelConfig
from agentos.config.agents import parse_agent_spec
from agentos.mcp.checks import McpUnavailable
from agentos.mcp.tools import McpHub
from agentos.outbound import OutboundPolicy
from agentos.providers.base import ChatRequest, Completion
from agentos.testing import eventually
from tests.agents.conftest import ServiceFactory, collect
from tests.agents.fakes import ScriptedProvider, answer, call

SERVER = [sys.executable, str(Path(__file__).with_name("mcp_server.py"))]
AGENT = {"tools": [], "mcp_servers": [{"name": "calc", "command": SERVER, "idempotent_tools": ["add"]}]}


@pytest.mark.slow
async def test_hub_lists_and_calls_tools_and_starts_a_dead_server_again() -> None:
    spec = parse_agent_spec({"name": "a", **AGENT})
    spec = msgspec.structs.replace(
        spec, mcp_servers=(msgspec.structs.replace(spec.mcp_servers[0], command=(*SERVER, "--mortal")),)
    )
    hub = McpHub(trusted=spec.mcp_servers)  # as the config file's agents are
    try:
        schemas = await hub.schemas(spec)
        names = sorted(s["function"]["name"] for s in schemas)
        assert names == ["calc__add", "calc__die", "calc__fail"]
        add = next(s for s in schemas if s["function"]["name"] == "calc__add")
        assert set(add["function"]["parameters"]["properties"]) == {"a", "b"}
        assert await hub.call(spec, "calc__add", {"a": 2, "b": 40}) == "42"
        assert (await hub.call(spec, "calc__fail", {"reason": "nope"})).startswith("error:")
        assert (await hub.call(spec, "calc__missing", {})).startswith("error:")
        # The server dies during a call: the call says so at once, the next use starts it again.
        died = await asyncio.wait_for(hub.call(spec, "calc__die", {}), 10)
        assert died.startswith("error: MCP server 'calc': the connection closed")
        assert await hub.call(spec, "calc__add", {"a": 1, "b": 2}) == "3"
    finally:
        await hub.close()


async def test_a_server_that_does_not_start_fails_at_once_saying_why() -> None:
    spec = parse_agent_spec({"name": "a", "mcp_servers": [{"name": "gone", "command": ["/nonexistent/mcp"]}]})
    hub = McpHub(trusted=spec.mcp_servers)
    try:
        with pytest.raises(McpUnavailable, match=r"MCP server 'gone': command '/nonexistent/mcp' not found"):
            await asyncio.wait_for(hub.schemas(spec), 5)  # not the 10 s handshake timeout
        assert await hub.call(spec, "gone__x", {}) == "error: MCP server 'gone': command '/nonexistent/mcp' not found"
    finally:
        await hub.close()


async def test_without_the_mcp_package_a_server_fails_at_once_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The `mcp` extra not installed (None in sys.modules: Python's own way to make an import
    fail): once a 20 s handshake timeout with a blank warning, now the install line at once."""
    monkeypatch.setitem(sys.modules, "mcp", None)
    spec = parse_agent_spec({"name": "a", **AGENT})
    hub = McpHub(trusted=spec.mcp_servers)
    try:
        with pytest.raises(McpUnavailable, match=r"`mcp` package is not installed; install it with pip install"):
            await asyncio.wait_for(hub.schemas(spec), 5)
    finally:
        await hub.close()


async def test_a_run_whose_server_exits_at_start_fails_at_once(make_service: ServiceFactory) -> None:
    exits = {"tools": [], "mcp_servers": [{"name": "calc", "command": [sys.executable, "-c", "raise SystemExit(3)"]}]}
    service = await make_service(ScriptedProvider(lambda _: answer("never asked")), agents={"calc": exits})
    run_id = await service.start_run("default", "calc", "add 2 and 3")
    events = await asyncio.wait_for(collect(service, run_id), 10)
    assert events[-1].type == "run.failed"
    assert events[-1].data["reason"] == (
        "tools: mcp_unavailable: MCP server 'calc': the connection closed (a stdio server exited: its stderr is in"
        " the agent server's stderr)"
    )


# Started, and then silent: it reads the handshake and never answers it.
HANGS = [sys.executable, "-c", "import sys, time; sys.stdin.readline(); time.sleep(60)"]


async def test_a_server_that_never_answers_the_handshake_fails_after_the_connect_timeout() -> None:
    spec = parse_agent_spec({"name": "a", "mcp_servers": [{"name": "mute", "command": HANGS}]})
    hub = McpHub(trusted=spec.mcp_servers, connect_timeout_s=0.3)
    loop = asyncio.get_running_loop()
    try:
        started = loop.time()
        with pytest.raises(McpUnavailable) as failed:
            await asyncio.wait_for(hub.schemas(spec), 4)
        assert loop.time() - started >= 0.3
        assert failed.value.code == "mcp_timeout"
        assert str(failed.value) == (
            "MCP server 'mute': no answer to the MCP handshake within 0.3 s (kernel.mcp_connect_timeout_s)"
        )
    finally:
        await hub.close()


async def test_a_run_whose_server_hangs_fails_after_kernel_mcp_connect_timeout_s(make_service: ServiceFactory) -> None:
    """The setting reaches the run's hub; the default (10 s) was 20 s."""
    assert KernelConfig().mcp_connect_timeout_s == 10.0
    mute = {"tools": [], "mcp_servers": [{"name": "mute", "command": HANGS}]}
    service = await make_service(
        ScriptedProvider(lambda _: answer("never asked")),
        agents={"mute": mute},
        kernel=KernelConfig(mcp_connect_timeout_s=0.3),
    )
    run_id = await service.start_run("default", "mute", "hello")
    events = await asyncio.wait_for(collect(service, run_id), 5)
    assert events[-1].type == "run.failed"
    assert events[-1].data["reason"] == (
        "tools: mcp_timeout: MCP server 'mute': no answer to the MCP handshake within 0.3 s"
        " (kernel.mcp_connect_timeout_s)"
    )


def use_calc(request: ChatRequest) -> Completion:
    if request.messages[-1]["role"] == "tool":
        return answer(f"the sum is {request.messages[-1]['content']}")
    assert request.tools is not None and {t["function"]["name"] for t in request.tools} == {"calc__add", "calc__fail"}
    return call("calc__add", {"a": 2, "b": 3})


async def test_an_agent_calls_an_mcp_tool(make_service: ServiceFactory) -> None:
    service = await make_service(ScriptedProvider(use_calc), agents={"calc": AGENT})
    run_id = await service.start_run("default", "calc", "add 2 and 3")
    events = await collect(service, run_id)
    assert events[-1].type == "run.completed" and events[-1].data["result"] == "the sum is 5"
    assert [e.data["name"] for e in events if e.type == "tool.call"] == ["calc__add"]


@pytest.mark.slow
async def test_streamable_http_server(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "mcp.log"
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(*SERVER, "--http", str(port), stdout=out, stderr=out)
    try:
        await wait_listening(port, proc)
        url = f"http://127.0.0.1:{port}/mcp"
        spec = parse_agent_spec({"name": "a", "mcp_servers": [{"name": "web", "transport": "http", "url": url}]})
        # Not an administrator's server: reached through the pinned client, loopback allowed.
        hub = McpHub(policy=OutboundPolicy.from_lists([], ["127.0.0.1/32"]))
        try:
            assert {s["function"]["name"] for s in await hub.schemas(spec)} == {"web__add", "web__fail"}
            assert await hub.call(spec, "web__add", {"a": 1, "b": 1}) == "2"
        finally:
            await hub.close()
    finally:
        proc.terminate()
        await proc.wait()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def wait_listening(port: int, proc: asyncio.subprocess.Process) -> None:
    """Poll the peer process's port (it offers no readiness event); bounded."""

    async def listening() -> bool:
        assert proc.returncode is None, "the MCP server exited"
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            return False
        writer.close()
        await writer.wait_closed()
        return True

    await eventually(listening, 20.0, "the MCP server to listen")
