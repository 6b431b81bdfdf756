"""The agent registry: agents from the config file (read-only) and from the API (stored).

An API body passes `agentos.agents.policy.check_agent` before it is stored, and again when it
is loaded after a restart (the administrator may have narrowed `[security]` since, and agents
stored by an older version were never checked): one that no longer passes is not loaded. An
agent whose MCP servers cannot start on this host (`agentos.mcp.checks`) is refused the
same way, and a config agent's stops the start-up.

Tenancy: config agents are the administrator's, visible (read-only) to every tenant, or only to
the tenants their `tenants` list names (another tenant gets `agent_not_found`). An API
agent belongs to the tenant that created it and is seen by that tenant only; another tenant's
agent answers `agent_not_found` exactly like one that does not exist. An API agent may not take
a config agent's name (409). One created by an admin-scoped key is stored with source
`admin`, so that it passes the policy again as an administrator's after a restart.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import msgspec

from agentos.agents.changes import AgentChanges
from agentos.agents.policy import AgentPolicy, check_agent, expand_server_names
from agentos.config.agents import (
    AgentSpec,
    McpServerSpec,
    config_agent_tenants,
    parse_agent_spec,
    parse_config_agents,
    spec_to_dict,
)
from agentos.errors import ConfigError, Conflict, InvalidInput, NotFound, RequestError
from agentos.journal.journal import Journal
from agentos.journal.postgres import PgJournalStore
from agentos.journal.store import JournalStore
from agentos.mcp.checks import CODE as MCP_UNAVAILABLE
from agentos.mcp.checks import unstartable

log = logging.getLogger(__name__)

# The `source` stored for an agent an admin-scoped key created (the API still reports "api").
_ADMIN_SOURCE = "admin"


class AgentRegistry:
    def __init__(
        self,
        store: JournalStore,
        journal: Journal,
        config_tables: Mapping[str, Mapping[str, Any]],
        policy: AgentPolicy | None = None,
    ) -> None:
        self._store = store
        self._journal = journal
        self._policy = policy or AgentPolicy()
        self._config = {spec.name: spec for spec in parse_config_agents(config_tables)}
        for spec in self._config.values():  # servers that cannot start here: refused at start-up
            if (problem := unstartable(spec.mcp_servers, where=f"agents.{spec.name}")) is not None:
                raise ConfigError(problem)
        self._config_tenants = config_agent_tenants(config_tables)  # name -> who may see it
        self._tenants: dict[str, dict[str, AgentSpec]] = {}  # tenant -> its API agents by name
        self.changes = AgentChanges()

    @property
    def policy(self) -> AgentPolicy:
        return self._policy

    def trusted_mcp_servers(self) -> list[McpServerSpec]:
        """The MCP servers an administrator defined: in config agents and `security.api_mcp_servers`."""
        servers = [s for spec in self._config.values() for s in spec.mcp_servers]
        return servers + list(self._policy.mcp_servers.values())

    async def load(self) -> None:
        """Bring back the agents created through the API before a restart, each its tenant's."""
        self._add(await self._store.agents_of_every_tenant())

    async def follow(self) -> None:
        """On a journal several nodes share, follow their writes of agents (`agentos.agents.changes`)."""
        if isinstance(self._store, PgJournalStore):
            await self.changes.follow(self._store)

    async def close(self) -> None:
        await self.changes.close()

    async def reload(self, tenant_id: str, *, only_changed: bool = False) -> None:
        """Read the tenant's API agents again: on a journal shared by several nodes another node
        may have created or replaced one since (one indexed query; none on SQLite, the only
        writer). `only_changed`: not if this node heard of no change since its last read."""
        if not isinstance(self._store, PgJournalStore) or (only_changed and self.changes.unchanged(tenant_id)):
            return
        mark = self.changes.mark(tenant_id)
        rows = await self._store.agents_of_tenant(tenant_id)
        self._tenants.pop(tenant_id, None)  # after the read: meanwhile requests see the old ones, never none
        self._add(rows)
        self.changes.read_at(tenant_id, mark)

    async def sees(self, tenant_id: str, name: str) -> bool:
        """Whether the tenant sees agent `name`, read again only if another node changed its agents,
        or if it is not found (made on another node a moment ago, not heard of yet)."""
        await self.reload(tenant_id, only_changed=True)
        if not self.has(tenant_id, name):
            await self.reload(tenant_id)
        return self.has(tenant_id, name)

    def has(self, tenant_id: str, name: str) -> bool:
        return any(spec.name == name for spec in self.list(tenant_id))

    def _add(self, rows: list[tuple[str, str, str, str]]) -> None:
        for tenant, name, spec_json, source in rows:
            if name in self._config:
                continue
            try:
                spec = parse_agent_spec(msgspec.json.decode(spec_json))
                check_agent(spec, self._policy, caller_is_admin=source == _ADMIN_SOURCE)
                _check_startable(spec)
            except RequestError as exc:
                log.warning("agent %r of tenant %r is not loaded: %s (docs/security.md)", name, tenant, exc.message)
                continue
            self._tenants.setdefault(tenant, {})[name] = spec

    async def create(
        self, tenant_id: str, body: Mapping[str, Any], now_ms: int, *, caller_is_admin: bool = False
    ) -> AgentSpec:
        """Create or replace an API-defined agent of `tenant_id`.

        Args:
            caller_is_admin: an administrator may define any agent; everyone else only what
                `[security]` allows (`agentos.agents.policy.check_agent`).

        Raises:
            InvalidInput: the body is not a valid agent, or over a limit (the message names the field).
            Forbidden: it asks for what the caller may not have (a stdio MCP server, a private URL).
            InvalidInput: `mcp_unavailable`, its MCP servers cannot start here (the `mcp` package
                is not installed, a stdio command is not found).
            Conflict: an agent of that name comes from the config file.
        """
        if not isinstance(body, Mapping):
            raise InvalidInput("the body must be a JSON object describing an agent")
        spec = parse_agent_spec(expand_server_names(body, self._policy))
        check_agent(spec, self._policy, caller_is_admin=caller_is_admin)
        _check_startable(spec)
        if spec.name in self._config:
            raise Conflict(f"agent {spec.name!r} is defined in the config file and cannot be replaced")
        spec_json = msgspec.json.encode(spec_to_dict(spec)).decode()
        source = _ADMIN_SOURCE if caller_is_admin else "api"
        await self._store.write([self._journal.put_agent(tenant_id, spec.name, spec_json, source, now_ms)])
        self._tenants.setdefault(tenant_id, {})[spec.name] = spec
        return spec

    def get(self, tenant_id: str, name: str) -> AgentSpec:
        """A config agent, or one of the tenant's own.

        Raises: NotFound (also for another tenant's agent).
        """
        spec = self._config.get(name) if self._sees_config_agent(tenant_id, name) else None
        spec = spec or self._tenants.get(tenant_id, {}).get(name)
        if spec is None:
            raise NotFound(f"agent {name!r} not found", code="agent_not_found")
        return spec

    def list(self, tenant_id: str) -> list[AgentSpec]:
        """The agents the tenant sees: the config's and its own."""
        config = {n: spec for n, spec in self._config.items() if self._sees_config_agent(tenant_id, n)}
        visible = {**self._tenants.get(tenant_id, {}), **config}
        return sorted(visible.values(), key=lambda s: s.name)

    def _sees_config_agent(self, tenant_id: str, name: str) -> bool:
        tenants = self._config_tenants.get(name)
        return tenants is None or tenant_id in tenants

    def source(self, name: str) -> str:
        return "config" if name in self._config else "api"

    def as_dict(self, spec: AgentSpec) -> dict[str, Any]:
        """The agent as the API shows it: its spec and where it comes from."""
        return {**spec_to_dict(spec), "source": self.source(spec.name)}


def _check_startable(spec: AgentSpec) -> None:
    """Raises: InvalidInput: `mcp_unavailable`, naming the field and what is missing."""
    if (problem := unstartable(spec.mcp_servers)) is not None:
        raise InvalidInput(problem, code=MCP_UNAVAILABLE)
