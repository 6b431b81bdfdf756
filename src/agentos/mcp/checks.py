"""Whether an agent's MCP servers can start on this host, checked when the agent is defined.

An agent whose servers cannot start was accepted, and then every run of it found out (issue
#14). Two causes are known before any run, and are refused where the agent is defined: the
`mcp` package, an optional extra, is not installed; a stdio server's command is not a program
here (not on `PATH`, or a path that is not an executable file). Config agents and
`security.api_mcp_servers` are refused at start-up (`ConfigError`, one line naming the field),
API agents at `POST /v1/agents` (422 `mcp_unavailable`), stored agents at load (not loaded,
logged). What only a run can find out (a server that exits, hangs or breaks the protocol) fails
that run with a message saying so (`agentos.mcp.tools`).

Usage::

    if (problem := unstartable(spec.mcp_servers, where="agents.ops")) is not None:
        raise ConfigError(problem)
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Sequence

from agentos.config.agents import McpServerSpec

MCP_INSTALL = "pip install 'agentos[mcp]'"
CODE = "mcp_unavailable"  # the 422 of an API agent whose servers cannot start; a run's failure
TIMEOUT_CODE = "mcp_timeout"  # a run's failure: a server started but did not answer the handshake in time


class McpUnavailable(ConnectionError):
    """An agent's MCP server cannot be started or reached (at run time); the message says which
    and why, `code` what kind of failure: `mcp_timeout` (no answer to the handshake within
    `kernel.mcp_connect_timeout_s`) or `mcp_unavailable` (anything else). The run that needed
    its tools fails with it (`tools: <code>: <message>`)."""

    def __init__(self, message: str, *, code: str = CODE) -> None:
        super().__init__(message)
        self.code = code


def mcp_missing() -> str | None:
    """Why the `mcp` package cannot be imported here (found, not imported: cheap), or None."""
    try:
        found = importlib.util.find_spec("mcp") is not None
    except (ImportError, ValueError):  # a broken parent package, or a module without a spec
        found = False
    return None if found else f"the `mcp` package is not installed; install it with {MCP_INSTALL}"


def command_missing(command: str) -> str | None:
    """Why `command` (a stdio server's argv[0]) cannot be started here, or None.

    A name without a slash is looked up on `PATH`, as the `mcp` package's stdio client does; a
    path (relative to the server's working directory) must be an executable file.
    """
    if os.sep in command or (os.altsep and os.altsep in command):
        if not os.path.isfile(command):
            return f"{command!r} does not exist (or is not a file)"
        if not os.access(command, os.X_OK):
            return f"{command!r} is not executable"
        return None
    if shutil.which(command) is None:
        return f"{command!r} is not found on PATH"
    return None


def unstartable(servers: Sequence[McpServerSpec], *, where: str = "", field: str = "mcp_servers") -> str | None:
    """Why one of `servers` cannot start on this host, as a message naming its field; or None.

    Args:
        servers: an agent's `mcp_servers` (or the administrator's `api_mcp_servers`).
        where: the prefix of the field in messages (`agents.ops`).
        field: the servers' field (`mcp_servers`); "" when each server is a table of its own,
            named by the server's name (`security.api_mcp_servers.files`).
    """
    if not servers:
        return None
    prefix = ".".join(part for part in (where, field) if part)
    missing = mcp_missing()
    if missing is not None:
        return f"{prefix}: {missing}"
    for i, server in enumerate(servers):
        problem = command_missing(server.command[0]) if server.transport == "stdio" else None
        if problem is not None:
            at = ".".join(part for part in (prefix, str(i) if field else server.name, "command") if part)
            return f"{at}: {problem}"
    return None


def describe_failure(exc: BaseException) -> str:
    """What went wrong when a server was started or reached, for a run's failure and the log:
    the `mcp` client's task groups unwrapped, a blank message (a bare timeout) named."""
    return "; ".join(dict.fromkeys(_describe_one(leaf) for leaf in _leaves(exc)))


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _describe_one(exc: BaseException) -> str:
    if isinstance(exc, ModuleNotFoundError) and (exc.name or "").partition(".")[0] == "mcp":
        return f"the `mcp` package is not installed; install it with {MCP_INSTALL}"
    if isinstance(exc, FileNotFoundError) and exc.filename:
        return f"command {exc.filename!r} not found"
    if isinstance(exc, TimeoutError):
        return str(exc) or "timed out"
    if connection_closed(exc):
        return "the connection closed (a stdio server exited: its stderr is in the agent server's stderr)"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def connection_closed(exc: BaseException) -> bool:
    """The `mcp` client's error for a connection that ended (the server exited or hung up).
    Read by name and message: this module does not import the optional `mcp` package."""
    return type(exc).__name__ == "MCPError" and str(getattr(exc, "message", "")) == "Connection closed"
