"""What an agent defined through the API may ask for (`[security]`, docs/security.md).

An agent from the config file is the administrator's and may do anything the server can. One
created through `POST /v1/agents` is a caller's, and a caller must not get a process on the
host or a connection to the server's private network by describing an agent:

- stdio MCP servers (a process started as the server's user) only by naming one the
  administrator listed in `security.api_mcp_servers`; URLs of HTTP ones pass
  `agentos.outbound.check_url`;
- built-in tools among `security.api_tools`;
- `command` limits, `max_turns`, `token_budget`, `human_timeout_s` and the delegation limits
  at most the administrator's maxima: over one is a 422 naming the field and the cap.

`check_agent(spec, policy, caller_is_admin=...)` is the one place that decides; today only the
config file is an administrator, and API keys with an admin scope will pass `True` here.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from agentos.config import CommandCaps, SecurityConfig, Settings
from agentos.config.agents import AgentSpec, McpServerSpec, parse_security
from agentos.errors import ConfigError, Forbidden, InvalidInput
from agentos.mcp.checks import unstartable
from agentos.outbound import OutboundPolicy, check_url


@dataclass(frozen=True, slots=True)
class AgentPolicy:
    outbound: OutboundPolicy = field(default_factory=OutboundPolicy)
    mcp_servers: Mapping[str, McpServerSpec] = field(default_factory=dict)  # the ones API agents may name
    security: SecurityConfig = field(default_factory=SecurityConfig)

    @classmethod
    def from_settings(cls, settings: Settings) -> AgentPolicy:
        """Raises: ConfigError: naming `security.<key>`."""
        outbound, servers = parse_security(settings.security)
        problem = unstartable(list(servers.values()), where="security.api_mcp_servers", field="")
        if problem is not None:  # servers that cannot start here: refused at start-up
            raise ConfigError(problem)
        return cls(outbound=outbound, mcp_servers=servers, security=settings.security)


def expand_server_names(body: Mapping[str, Any], policy: AgentPolicy) -> dict[str, Any]:
    """An API body's `mcp_servers` entries that only name a server (`{"name": "files"}`)
    replaced by the administrator's definition of it.

    Raises:
        Forbidden: `mcp_server_not_allowed`, a name the administrator did not list.
    """
    servers = body.get("mcp_servers")
    if not isinstance(servers, list):
        return dict(body)
    return {**body, "mcp_servers": [_expand(entry, policy) for entry in servers]}


def _expand(entry: Any, policy: AgentPolicy) -> Any:
    if not (isinstance(entry, Mapping) and set(entry) == {"name"} and isinstance(entry["name"], str)):
        return entry
    server = policy.mcp_servers.get(entry["name"])
    if server is None:
        allowed = ", ".join(sorted(policy.mcp_servers)) or "none"
        raise Forbidden(
            f"mcp_servers: {entry['name']!r} is not a server the administrator allows "
            f"(security.api_mcp_servers: {allowed})",
            code="mcp_server_not_allowed",
        )
    return msgspec.to_builtins(server)


def check_agent(spec: AgentSpec, policy: AgentPolicy, *, caller_is_admin: bool) -> None:
    """Whether the caller may define `spec`; an administrator may define anything.

    Raises:
        Forbidden: a stdio MCP server not listed by the administrator (`stdio_mcp_not_allowed`),
            a URL that points somewhere refused (`url_not_allowed`), a tool not in
            `security.api_tools` (`tool_not_allowed`).
        InvalidInput: `limit_exceeded`, a limit over the administrator's maximum.
    """
    if caller_is_admin:
        return
    _check_servers(spec, policy)
    for tool in spec.tools:
        if tool not in policy.security.api_tools:
            raise Forbidden(
                f"tools: {tool!r} is not among the tools API agents may use (security.api_tools)",
                code="tool_not_allowed",
            )
    for where, value, cap_key, cap in _limits(spec, policy.security):
        if value > cap:
            raise InvalidInput(
                f"{where}: {value} is over the administrator's maximum security.{cap_key} = {cap}",
                code="limit_exceeded",
            )
    _check_token_budget(spec, policy.security.max_token_budget)


def _check_servers(spec: AgentSpec, policy: AgentPolicy) -> None:
    for i, server in enumerate(spec.mcp_servers):
        if policy.mcp_servers.get(server.name) == server:
            continue  # the administrator's own definition, named or repeated in full
        if server.transport == "stdio":
            raise Forbidden(
                f"mcp_servers.{i}: a stdio server is a process on the host; an API agent may only name "
                "one listed in security.api_mcp_servers",
                code="stdio_mcp_not_allowed",
            )
        try:
            check_url(server.url, policy.outbound)
        except Forbidden as exc:
            raise Forbidden(f"mcp_servers.{i}.url: {exc.message}", code=exc.code) from None


def _limits(spec: AgentSpec, security: SecurityConfig) -> Iterator[tuple[str, float, str, float]]:
    """(field, the spec's value, the cap's key, the cap) for every capped limit."""
    caps: CommandCaps = security.max_command
    for name in caps.__struct_fields__:
        yield f"command.{name}", getattr(spec.command, name), f"max_command.{name}", getattr(caps, name)
    for name in ("max_turns", "human_timeout_s", "max_delegation_depth", "max_delegation_width"):
        cap_key = name if name.startswith("max_") else f"max_{name}"
        yield name, getattr(spec, name), cap_key, getattr(security, cap_key)


def _check_token_budget(spec: AgentSpec, cap: int) -> None:
    if cap and not 0 < spec.token_budget <= cap:
        shown = "0 (unlimited)" if spec.token_budget == 0 else str(spec.token_budget)
        raise InvalidInput(
            f"token_budget: {shown} is over the administrator's maximum security.max_token_budget = {cap}",
            code="limit_exceeded",
        )
