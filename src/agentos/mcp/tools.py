"""Tools from MCP servers (stdio and streamable HTTP), through the official `mcp` package.

One connection per distinct server spec, opened on first use and shared by every run of
every agent that declares it. The MCP client is built on anyio context managers that must be
entered and left in one task, so each connection lives in its own long-lived task and runs
only talk to its `ClientSession`. Tools are offered to the model as `<server>__<tool>`.

Servers the administrator defined (`trusted`: config agents, `security.api_mcp_servers`) are
reached as they are written. Any other one came from an API caller: a stdio one is refused
(it would be a process on the host; `agentos.agents.policy` refuses it at creation already),
and an HTTP one is reached through `agentos.mcp.http`, which checks every request
against the outbound policy and connects only to the addresses it checked.

Failures are fast and say why (issue #14): a server that cannot be started or reached fails
`schemas()` with `McpUnavailable` naming it and the cause (`mcp_checks.describe_failure`), and
the run fails with it; only a server that never answers the handshake is waited for, at most
`kernel.mcp_connect_timeout_s` (10 s by default; the run fails with `mcp_timeout`). A server
that dies is forgotten at its first failed call, and started again at the next use. What can be
known before any run is refused where the agent is defined (`agentos.mcp.checks`).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import sys
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any

from agentos.config.agents import MCP_TOOL_SEPARATOR, AgentSpec, McpServerSpec
from agentos.errors import Forbidden
from agentos.mcp.checks import TIMEOUT_CODE, McpUnavailable, connection_closed, describe_failure
from agentos.outbound import OutboundPolicy, Resolver, check_url, resolve_checked
from agentos.telemetry import NO_TRACING, Tracing, trace_context

log = logging.getLogger(__name__)

DEFAULT_CONNECT_TIMEOUT_S = 10.0  # kernel.mcp_connect_timeout_s
CALL_TIMEOUT_S = 120.0


@dataclass(frozen=True, slots=True)
class _Trust:
    """Which servers are the administrator's, the policy for everyone else's, and how long a
    server may take to start."""

    trusted: frozenset[McpServerSpec]
    policy: OutboundPolicy
    resolver: Resolver | None
    connect_timeout_s: float  # a server's start and handshake


class _Connection:
    def __init__(self, server: McpServerSpec, trust: _Trust) -> None:
        self.server = server
        self._trust = trust
        self.session: Any = None
        self.tools: list[Any] = []
        self._ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._closed = asyncio.Event()
        self._scope: Any = None  # the anyio cancel scope of the connection's life, once it starts
        self._task = asyncio.create_task(self._serve(), name=f"mcp-{server.name}")

    async def wait_ready(self) -> None:
        """Raises: McpUnavailable: the server failed to start, or did not finish the handshake in time."""
        await import_mcp()  # the server's time starts once the client is loaded
        timeout_s = self._trust.connect_timeout_s
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), timeout=timeout_s)
        except TimeoutError:
            raise McpUnavailable(
                f"MCP server {self.server.name!r}: no answer to the MCP handshake within {timeout_s:g} s"
                " (kernel.mcp_connect_timeout_s)",
                code=TIMEOUT_CODE,
            ) from None

    def stop(self) -> None:
        """End the connection without waiting: a ready one leaves its session; one still
        starting (a server that does not answer the handshake) is cancelled through its anyio
        scope: the `mcp` client's shutdown is shielded from that, and stops the server (2 s
        for it to exit once its stdin is closed, then SIGTERM; a native `Task.cancel()` cuts
        through the shield and leaves the server running). No run waits for it, only
        `McpHub.close`."""
        self._closed.set()
        if self.session is None and self._scope is not None:
            self._scope.cancel()

    def stopped(self) -> bool:
        return self._task.done()

    async def close(self) -> None:
        self.stop()
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await asyncio.wait_for(self._task, timeout=10.0)
        if not self._task.done():
            self._task.cancel()

    async def _serve(self) -> None:
        try:
            await import_mcp()
            import anyio  # a dependency of `mcp`

            from mcp import ClientSession  # the optional extra: its absence is reported as any failure

            with anyio.CancelScope() as self._scope:
                if self._closed.is_set():  # stopped while the client was loading
                    self._scope.cancel()
                async with contextlib.AsyncExitStack() as stack:
                    read, write = await stack.enter_async_context(_transport(self.server, self._trust))
                    session = await stack.enter_async_context(ClientSession(read, write))
                    await session.initialize()
                    self.tools = list((await session.list_tools()).tools)
                    self.session = session
                    self._ready.set_result(None)
                    await self._closed.wait()
        except Exception as exc:  # any failure to connect is reported to the waiting runs at once
            reason = describe_failure(exc)
            log.warning("MCP server %r failed: %s", self.server.name, reason)
            self._fail(f"MCP server {self.server.name!r}: {reason}")
        finally:  # however the task ended, no run waits for it
            self._fail(f"MCP server {self.server.name!r}: closed before it was ready")

    def _fail(self, message: str) -> None:
        if not self._ready.done():
            self._ready.set_exception(McpUnavailable(message))
            self._ready.exception()  # retrieved: a connection nobody waits for logs nothing more


_MCP_MODULES = ("mcp", "mcp.client.stdio", "mcp.client.streamable_http")


async def import_mcp() -> None:
    """Load the `mcp` client in a thread, once per process: its first import takes 1-2 s of
    CPU (its models), which on the loop would stall every request and eat into the first
    server's handshake time. A missing package is left for the import in `_serve` to report."""
    if _MCP_MODULES[-1] in sys.modules:
        return
    with contextlib.suppress(ImportError):
        await asyncio.to_thread(lambda: [importlib.import_module(name) for name in _MCP_MODULES])


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

    from agentos.mcp.http import pinned_client, system_cas

    target = check_url(url, trust.policy)
    # Resolved and checked here too, so a refusal is reported as such rather than from
    # inside the MCP client's task group; the client checks again at every connection.
    await resolve_checked(target.host, target.port, trust.policy, trust.resolver)
    async with (
        pinned_client(trust.policy, trust.resolver, await system_cas()) as client,
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
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        tracing: Tracing = NO_TRACING,
    ) -> None:
        """Args:
        trusted: the servers an administrator defined, started or reached as written.
        policy: where other servers' URLs may point (default: public addresses only).
        resolver: DNS for other servers' names (default: the loop's `getaddrinfo`).
        connect_timeout_s: how long a use waits for a server to start and answer the
            handshake (`kernel.mcp_connect_timeout_s`).
        """
        self._tracing = tracing
        self._connections: dict[McpServerSpec, _Connection] = {}
        self._stopping: list[_Connection] = []  # forgotten, their servers still being stopped
        self._trust = _Trust(frozenset(trusted), policy or OutboundPolicy(), resolver, connect_timeout_s)

    async def schemas(self, spec: AgentSpec) -> list[dict[str, Any]]:
        """OpenAI tool schemas of the agent's MCP tools.

        Raises:
            McpUnavailable: a server cannot be started or reached; the message names it and why
                (the run fails with it; the next use tries to connect again).
        """
        schemas: list[dict[str, Any]] = []
        for server in spec.mcp_servers:
            connection = await self._connect(server)
            schemas += [_schema(server, tool) for tool in connection.tools]
        return schemas

    async def call(self, spec: AgentSpec, tool_name: str, arguments: dict[str, Any]) -> str:
        """The tool's text result; failures come back as `error: ...` text for the model."""
        server = spec.mcp_server(tool_name)
        if server is None:
            return f"error: unknown tool {tool_name!r}"
        try:
            connection = await self._connect(server)
        except McpUnavailable as exc:
            return f"error: {exc}"
        name = tool_name.partition(MCP_TOOL_SEPARATOR)[2]
        if (
            self._tracing.on
        ):  # a client span, its trace context in the request's `_meta` (MCP carries no headers per call)
            attributes = {"rpc.system": "mcp", "rpc.method": "tools/call", "agentos.mcp.server": server.name}
            with self._tracing.span(f"tools/call {name}", attributes, kind="client") as span:
                return await self._call(connection, server, tool_name, name, arguments, trace_context(span))
        return await self._call(connection, server, tool_name, name, arguments, None)

    async def _call(
        self,
        connection: _Connection,
        server: McpServerSpec,
        tool_name: str,
        name: str,
        arguments: dict[str, Any],
        meta: dict[str, str] | None,
    ) -> str:
        try:
            call = (
                connection.session.call_tool(name, arguments, meta=meta)
                if meta
                else connection.session.call_tool(name, arguments)
            )
            result = await asyncio.wait_for(call, timeout=CALL_TIMEOUT_S)
        except TimeoutError:
            return f"error: the call of {tool_name!r} took longer than {CALL_TIMEOUT_S:g} s"
        except Exception as exc:  # an MCP protocol error is the tool's failure, told to the model
            if connection_closed(exc):  # the server is gone: the next use starts it again
                self._forget(server, connection)
                return f"error: MCP server {server.name!r}: {describe_failure(exc)}"
            return f"error: {type(exc).__name__}: {exc}"
        text = "\n".join(getattr(block, "text", "") or str(block) for block in result.content)
        return f"error: {text}" if getattr(result, "is_error", False) else text

    async def close(self) -> None:
        connections, self._connections = list(self._connections.values()), {}
        stopping, self._stopping = self._stopping, []
        # together: each server may take seconds to stop (2 s, then SIGTERM)
        await asyncio.gather(*(connection.close() for connection in connections + stopping))

    async def _connect(self, server: McpServerSpec) -> _Connection:
        """Raises: McpUnavailable."""
        connection = self._connections.get(server)
        if connection is None:
            connection = self._connections[server] = _Connection(server, self._trust)
        try:
            await connection.wait_ready()
        except McpUnavailable:
            self._forget(server, connection)  # try again on the next use
            raise
        return connection

    def _forget(self, server: McpServerSpec, connection: _Connection) -> None:
        """Drop the connection and stop it in the background: the run that found it broken
        fails (or hears of it) at once, not after the server's shutdown."""
        if self._connections.get(server) is connection:
            del self._connections[server]
        connection.stop()
        self._stopping = [c for c in self._stopping if not c.stopped()] + [connection]


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
