"""Agent specifications: what an agent may do, parsed from a TOML table or an API body.

Usage::

    spec = parse_agent_spec({"name": "ops", "tools": ["run_command", "ask_human"]})
    spec = parse_agent_spec(settings.agents["ops"], name="ops", error=ConfigError, where="agents.ops")

Every validation error names the offending field (`agents.ops.max_turns: ...`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

import msgspec

from agentos.config.security import (
    MAX_TURNS,
    CpuSeconds,
    DelegationDepth,
    DelegationWidth,
    HumanTimeout,
    Megabytes,
    OutputBytes,
    Processes,
    Seconds,
    SecurityConfig,
    TokenBudget,
    Turns,
)
from agentos.config.tenants import Budget
from agentos.errors import AgentOSError, ConfigError, InvalidInput
from agentos.kernel import OnBusy
from agentos.outbound import OutboundPolicy

BUILTIN_TOOLS = ("run_command", "ask_human", "delegate")
# Offered by naming collections in `knowledge`, not by listing it in `tools`: the collections are
# what the tool needs, and an agent listing the tool without any would offer a tool that cannot work.
SEARCH_KNOWLEDGE = "search_knowledge"
MAX_KNOWLEDGE_COLLECTIONS = 16  # each search embeds once and searches each collection: bounded
MAX_TURNS_CEILING = MAX_TURNS
MCP_TOOL_SEPARATOR = "__"
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")


class CommandLimits(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Limits of one `run_command` call (see `agentos.sandbox.sandbox`); each has a maximum
    (`agentos.config.security`), whoever defines the agent."""

    timeout_s: Seconds = 30.0
    cpu_s: CpuSeconds = 30
    memory_mb: Megabytes = 1024
    file_size_mb: Megabytes = 64
    max_processes: Processes = 1024  # RLIMIT_NPROC counts per uid, so it bounds all commands together
    output_max_bytes: OutputBytes = 16_384


class McpServerSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """An MCP server whose tools the agent may call, as `<server>__<tool>`."""

    name: str
    transport: Literal["stdio", "http"] = "stdio"
    command: tuple[str, ...] = ()  # stdio: the server's argv
    url: str = ""  # http: the streamable HTTP endpoint
    idempotent_tools: tuple[str, ...] = ()  # safe to retry after a crash


class AgentSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    name: str
    model: str | None = None  # None: the provider's configured model
    system_prompt: str = ""
    tools: tuple[str, ...] = ("run_command", "ask_human")
    mcp_servers: tuple[McpServerSpec, ...] = ()
    max_turns: Turns = 8
    token_budget: TokenBudget = 0  # prompt + completion tokens per run; 0 = unlimited
    # What one run's model calls may cost together, in the operator's currency (a budget held by
    # reservation before each call: agentos.tenancy.budgets); 0 = none.
    max_cost: Budget = 0.0
    max_delegation_depth: DelegationDepth = 1
    max_delegation_width: DelegationWidth = 4
    approval_required: tuple[str, ...] = ()
    human_timeout_s: HumanTimeout = 3600.0
    command: CommandLimits = msgspec.field(default_factory=CommandLimits)
    knowledge: tuple[str, ...] = ()  # collection names of the run's tenant: offers `search_knowledge`
    on_busy: OnBusy | None = None  # its sessions' default `on_busy` (docs/conversations.md); None: replace

    def mcp_server(self, tool_name: str) -> McpServerSpec | None:
        """The MCP server a `<server>__<tool>` name belongs to, if any."""
        server, sep, _ = tool_name.partition(MCP_TOOL_SEPARATOR)
        if not sep:
            return None
        return next((s for s in self.mcp_servers if s.name == server), None)

    def offers(self, tool_name: str) -> bool:
        """Whether the model may call `tool_name`: a listed built-in, `search_knowledge` with
        collections named, or a tool of one of the MCP servers."""
        if tool_name == SEARCH_KNOWLEDGE:
            return bool(self.knowledge)
        return tool_name in self.tools or self.mcp_server(tool_name) is not None


def parse_agent_spec(
    data: Mapping[str, Any],
    *,
    name: str | None = None,
    error: type[AgentOSError] = InvalidInput,
    where: str = "",
) -> AgentSpec:
    """Validate `data` into an `AgentSpec`.

    Args:
        data: a config table (`[agents.<name>]`) or an API body.
        name: the agent's name when it comes from the table's key rather than the body.
        error: `ConfigError` for config tables, `InvalidInput` (422) for API bodies.
        where: a prefix for field names in messages (`agents.ops`).

    Raises:
        ConfigError | InvalidInput: the message names the offending field.
    """
    tree = dict(data)
    if name is not None:
        tree.setdefault("name", name)
    try:
        spec = msgspec.convert(tree, type=AgentSpec, strict=False)
        _check(spec)
    except msgspec.ValidationError as exc:
        raise error(_field_message(str(exc), where)) from None
    except _FieldError as exc:
        raise error(_prefixed(exc.field, exc.message, where)) from None
    return spec


def parse_config_agents(tables: Mapping[str, Mapping[str, Any]]) -> list[AgentSpec]:
    """The `[agents.<name>]` tables of the config file, validated (`tenants` aside: see
    `config_agent_tenants`).

    Raises:
        ConfigError: naming `agents.<name>.<field>`.
    """
    config_agent_tenants(tables)  # validates `tenants`
    return [
        parse_agent_spec(_without_tenants(t), name=n, error=ConfigError, where=f"agents.{n}") for n, t in tables.items()
    ]


def config_agent_tenants(tables: Mapping[str, Mapping[str, Any]]) -> dict[str, frozenset[str]]:
    """The config agents limited to some tenants (`tenants = ["acme"]`), each with its tenants.

    A config agent is the administrator's and may hold what no tenant may define (a stdio MCP
    server, a host process): `tenants` says who may see and run it; without it, every tenant.

    Raises:
        ConfigError: `tenants` is not a non-empty list of tenant ids.
    """
    limited: dict[str, frozenset[str]] = {}
    for name, table in tables.items():
        if "tenants" not in table:
            continue
        tenants = table["tenants"]
        if not isinstance(tenants, list) or not tenants or not all(isinstance(t, str) and t for t in tenants):
            raise ConfigError(f"agents.{name}.tenants: expected a non-empty list of tenant ids")
        limited[name] = frozenset(tenants)
    return limited


def _without_tenants(table: Mapping[str, Any]) -> Mapping[str, Any]:
    return {k: v for k, v in table.items() if k != "tenants"} if "tenants" in table else table


def parse_mcp_server(
    data: Mapping[str, Any], *, name: str, error: type[AgentOSError] = InvalidInput, where: str = ""
) -> McpServerSpec:
    """One MCP server table (`[security.api_mcp_servers.<name>]`), validated as in an agent.

    Raises:
        ConfigError | InvalidInput: the message names the offending field.
    """
    try:
        server = msgspec.convert({**data, "name": name}, type=McpServerSpec, strict=False)
        _check_server(server, where)
    except msgspec.ValidationError as exc:
        raise error(_field_message(str(exc), where)) from None
    except _FieldError as exc:
        raise error(f"{exc.field}: {exc.message}") from None
    return server


def parse_security(security: SecurityConfig) -> tuple[OutboundPolicy, dict[str, McpServerSpec]]:
    """What `[security]` lets API agents reach: the outbound policy and the MCP servers they may
    name, as far as the config can say (`agentos.agents.policy` also checks that those servers
    can start on this host).

    Raises: ConfigError: naming `security.<key>`."""
    outbound = OutboundPolicy.from_lists(security.outbound_allow, security.outbound_allow_networks)
    for tool in security.api_tools:
        if tool not in BUILTIN_TOOLS:
            raise ConfigError(f"security.api_tools: unknown tool {tool!r}; built-ins are {', '.join(BUILTIN_TOOLS)}")
    servers = {
        name: parse_mcp_server(table, name=name, error=ConfigError, where=f"security.api_mcp_servers.{name}")
        for name, table in security.api_mcp_servers.items()
    }
    return outbound, servers


def spec_to_dict(spec: AgentSpec) -> dict[str, Any]:
    data: dict[str, Any] = msgspec.to_builtins(spec)
    return data


class _FieldError(Exception):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def _check(spec: AgentSpec) -> None:
    if not _NAME_RE.match(spec.name):
        raise _FieldError("name", f"must match {_NAME_RE.pattern}, got {spec.name!r}")
    servers = {s.name for s in spec.mcp_servers}
    for tool in spec.tools:
        if tool == SEARCH_KNOWLEDGE:
            raise _FieldError("tools", f"{tool!r} is offered by naming collections in `knowledge`, not in `tools`")
        if tool not in BUILTIN_TOOLS:
            raise _FieldError("tools", f"unknown tool {tool!r}; built-ins are {', '.join(BUILTIN_TOOLS)}")
    _check_knowledge(spec.knowledge)
    for i, server in enumerate(spec.mcp_servers):
        _check_server(server, f"mcp_servers.{i}")
    if len(servers) != len(spec.mcp_servers):
        raise _FieldError("mcp_servers", "server names must be unique")
    for tool in spec.approval_required:
        if not spec.offers(tool):
            raise _FieldError("approval_required", f"{tool!r} is not one of the agent's tools")


def _check_knowledge(names: tuple[str, ...]) -> None:
    if len(names) > MAX_KNOWLEDGE_COLLECTIONS:
        raise _FieldError("knowledge", f"at most {MAX_KNOWLEDGE_COLLECTIONS} collections, got {len(names)}")
    for name in names:
        if not _NAME_RE.match(name):
            raise _FieldError("knowledge", f"collection names must match {_NAME_RE.pattern}, got {name!r}")
    if len(set(names)) != len(names):
        raise _FieldError("knowledge", "collection names must be unique")


def _check_server(server: McpServerSpec, field: str) -> None:
    if not _NAME_RE.match(server.name) or MCP_TOOL_SEPARATOR in server.name:
        raise _FieldError(f"{field}.name", f"must match {_NAME_RE.pattern} without '__', got {server.name!r}")
    if server.transport == "stdio" and not server.command:
        raise _FieldError(f"{field}.command", "a stdio server needs its argv")
    if server.transport == "http" and not server.url.startswith(("http://", "https://")):
        raise _FieldError(f"{field}.url", f"must start with http:// or https://, got {server.url!r}")


def _prefixed(field: str, message: str, where: str) -> str:
    return f"{where}.{field}: {message}" if where else f"{field}: {message}"


def _field_message(text: str, where: str) -> str:
    """msgspec says `Expected ... - at `$.max_turns``; lead with the field instead."""
    message, sep, at = text.rpartition(" - at `$.")
    if not sep:
        message = text.replace("Object contains unknown field", "unknown field")
        return f"{where}: {message}" if where else message
    field = at.rstrip("`").replace("[", ".").replace("]", "")
    return _prefixed(field, message, where)
