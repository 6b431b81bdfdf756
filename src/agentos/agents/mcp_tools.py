"""Tools from MCP servers (stdio and streamable HTTP), through the official `mcp` package.

One connection per distinct server spec, opened on first use and shared by every run of
every agent that declares it. The MCP client is built on anyio context managers that must be
entered and left in one task, so each connection lives in its own long-lived task and runs
only talk to its `ClientSession`. Tools are offered to the model as `<server>__<tool>`.

Servers the administrator defined (`trusted`: config agents, `security.api_mcp_servers`) are
reached as they are written. Any other one came from an API caller: a stdio one is refused
(it would be a process on the host; `agentos.agents.policy` refuses it at creation already),
and an HTTP one is reached through `agentos.agents.mcp_http`, which checks every request
against the outbound policy and connects only to the addresses it checked.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any

from agentos.agents.spec import MCP_TOOL_SEPARATOR, AgentSpec, McpServerSpec
from agentos.errors import Forbidden
from agentos.outbound import OutboundPolicy, Resolver, check_url, resolve_checked

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 20.0
CALL_TIMEOUT_S = 120.0


@dataclass(frozen=True, slots=True)
class _Trust:
    """Which servers are the administrator's, and the policy for everyone else's."""

    trusted: frozenset[McpServerSpec]
    policy: OutboundPolicy
    resolver: Resolver | None


class _Connection:
    def __init__(self, server: McpServerSpec, trust: _Trust) -> None:
        self.server = server
        self._trust = trust
        self.session: Any = None
        self.tools: list[Any] = []
        self._ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._closed = asyncio.Event()
        self._task = asyncio.create_task(self._serve(), name=f"mcp-{server.name}")

    async def wait_ready(self) -> None:
        await asyncio.wait_for(asyncio.shield(self._ready), timeout=CONNECT_TIMEOUT_S)

    async def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await asyncio.wait_for(self._task, timeout=5.0)
        if not self._task.done():
            self._task.cancel()

    async def _serve(self) -> None:
        from mcp import ClientSession

        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(_transport(self.server, self._trust))
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                self.tools = list((await session.list_tools()).tools)
                self.session = session
                self._ready.set_result(None)
                await self._closed.wait()
        except Exception as exc:  # any failure to connect is reported to the waiting runs
            log.warning("MCP server %r failed: %s", self.server.name, exc)
            if not self._ready.done():
                self._ready.set_exception(ConnectionError(f"MCP server {self.server.name!r}: {exc}"))


def _transport(server: McpServerSpec, trust: _Trust) -> Any:
    if server not in trust.trusted:
        if server.transport == "stdio":
            raise Forbidden(
                "a stdio server an administrator did not define is never started", code="stdio_mcp_not_allowed"
            )
        return _pinned_http(server.url, trust)
    if server.transport == "stdio":
        from mcp.client.stdio import StdioServerParameters, stdio_client

        params = StdioServerParameters(command=server.command[0], args=list(server.command[1:]))
        return stdio_client(params)
    from mcp.client.streamable_http import streamable_http_client

    return streamable_http_client(server.url)


@contextlib.asynccontextmanager
async def _pinned_http(url: str, trust: _Trust) -> AsyncIterator[Any]:
    from mcp.client.streamable_http import streamable_http_client

    from agentos.agents.mcp_http import pinned_client

    target = check_url(url, trust.policy)
    # Resolved and checked here too, so a refusal is reported as such rather than from
    # inside the MCP client's task group; the client checks again at every connection.
    await resolve_checked(target.host, target.port, trust.policy, trust.resolver)
    async with (
        pinned_client(trust.policy, trust.resolver) as client,
        streamable_http_client(url, http_client=client) as streams,
    ):
        yield streams


class McpHub:
    """The MCP servers of all agents. Usage: `await hub.schemas(spec)`, `await hub.call(spec, name, args)`."""

    def __init__(
        self,
        *,
        trusted: Iterable[McpServerSpec] = (),
        policy: OutboundPolicy | None = None,
        resolver: Resolver | None = None,
    ) -> None:
        """Args:
        trusted: the servers an administrator defined, started or reached as written.
        policy: where other servers' URLs may point (default: public addresses only).
        resolver: DNS for other servers' names (default: the loop's `getaddrinfo`).
        """
        self._connections: dict[McpServerSpec, _Connection] = {}
        self._trust = _Trust(frozenset(trusted), policy or OutboundPolicy(), resolver)

    async def schemas(self, spec: AgentSpec) -> list[dict[str, Any]]:
        """OpenAI tool schemas of the agent's MCP tools; a server that is down offers none (logged)."""
        schemas: list[dict[str, Any]] = []
        for server in spec.mcp_servers:
            try:
                connection = await self._connect(server)
            except (ConnectionError, TimeoutError) as exc:
                log.warning("agent %r runs without the tools of %s", spec.name, exc)
                continue
            schemas += [_schema(server, tool) for tool in connection.tools]
        return schemas

    async def call(self, spec: AgentSpec, tool_name: str, arguments: dict[str, Any]) -> str:
        """The tool's text result; failures come back as `error: ...` text for the model."""
        server = spec.mcp_server(tool_name)
        if server is None:
            return f"error: unknown tool {tool_name!r}"
        try:
            connection = await self._connect(server)
            name = tool_name.partition(MCP_TOOL_SEPARATOR)[2]
            result = await asyncio.wait_for(connection.session.call_tool(name, arguments), timeout=CALL_TIMEOUT_S)
        except (ConnectionError, TimeoutError) as exc:
            return f"error: {exc or 'MCP call timed out'}"
        except Exception as exc:  # an MCP protocol error is the tool's failure, told to the model
            return f"error: {type(exc).__name__}: {exc}"
        text = "\n".join(getattr(block, "text", "") or str(block) for block in result.content)
        return f"error: {text}" if getattr(result, "is_error", False) else text

    async def close(self) -> None:
        connections, self._connections = list(self._connections.values()), {}
        for connection in connections:
            await connection.close()

    async def _connect(self, server: McpServerSpec) -> _Connection:
        connection = self._connections.get(server)
        if connection is None:
            connection = self._connections[server] = _Connection(server, self._trust)
        try:
            await connection.wait_ready()
        except (ConnectionError, TimeoutError):
            self._connections.pop(server, None)  # try again on the next use
            await connection.close()
            raise
        return connection


def _schema(server: McpServerSpec, tool: Any) -> dict[str, Any]:
    parameters = getattr(tool, "input_schema", None) or {"type": "object", "properties": {}}
    return {
        "type": "function",
        "function": {
            "name": f"{server.name}{MCP_TOOL_SEPARATOR}{tool.name}",
            "description": getattr(tool, "description", None) or "",
            "parameters": parameters,
        },
    }
