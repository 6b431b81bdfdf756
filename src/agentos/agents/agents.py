"""The agent registry: agents from the config file (read-only) and from the API (stored).

An API body passes `agentos.agents.policy.check_agent` before it is stored, and again when it
is loaded after a restart (the administrator may have narrowed `[security]` since, and agents
stored by an older version were never checked): one that no longer passes is not loaded.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import msgspec

from agentos.agents.journal import Journal
from agentos.agents.policy import AgentPolicy, check_agent, expand_server_names
from agentos.agents.spec import AgentSpec, McpServerSpec, parse_agent_spec, parse_config_agents, spec_to_dict
from agentos.agents.store import RunStore
from agentos.errors import Conflict, InvalidInput, NotFound, RequestError

log = logging.getLogger(__name__)


class AgentRegistry:
    def __init__(
        self,
        store: RunStore,
        journal: Journal,
        config_tables: Mapping[str, Mapping[str, Any]],
        policy: AgentPolicy | None = None,
    ) -> None:
        self._store = store
        self._journal = journal
        self._policy = policy or AgentPolicy()
        self._config = {spec.name: spec for spec in parse_config_agents(config_tables)}
        self._agents: dict[str, AgentSpec] = dict(self._config)

    @property
    def policy(self) -> AgentPolicy:
        return self._policy

    def trusted_mcp_servers(self) -> list[McpServerSpec]:
        """The MCP servers an administrator defined: in config agents and `security.api_mcp_servers`."""
        servers = [s for spec in self._config.values() for s in spec.mcp_servers]
        return servers + list(self._policy.mcp_servers.values())

    async def load(self) -> None:
        """Bring back the agents created through the API before a restart."""
        for name, spec_json, _source in await self._store.read(self._journal.load_agents):
            if name in self._config:
                continue
            try:
                spec = parse_agent_spec(msgspec.json.decode(spec_json))
                # Stored agents were all created by non-admin callers so far; the keys' scopes
                # will store the creator's and pass it here.
                check_agent(spec, self._policy, caller_is_admin=False)
            except RequestError as exc:
                log.warning("agent %r is not loaded: %s (docs/security.md)", name, exc.message)
                continue
            self._agents[name] = spec

    async def create(self, body: Mapping[str, Any], now_ms: int, *, caller_is_admin: bool = False) -> AgentSpec:
        """Create or replace an API-defined agent.

        Args:
            caller_is_admin: an administrator may define any agent; everyone else only what
                `[security]` allows (`agentos.agents.policy.check_agent`).

        Raises:
            InvalidInput: the body is not a valid agent, or over a limit (the message names the field).
            Forbidden: it asks for what the caller may not have (a stdio MCP server, a private URL).
            Conflict: an agent of that name comes from the config file.
        """
        if not isinstance(body, Mapping):
            raise InvalidInput("the body must be a JSON object describing an agent")
        spec = parse_agent_spec(expand_server_names(body, self._policy))
        check_agent(spec, self._policy, caller_is_admin=caller_is_admin)
        if spec.name in self._config:
            raise Conflict(f"agent {spec.name!r} is defined in the config file and cannot be replaced")
        spec_json = msgspec.json.encode(spec_to_dict(spec)).decode()
        await self._store.write([self._journal.put_agent(spec.name, spec_json, "api", now_ms)])
        self._agents[spec.name] = spec
        return spec

    def get(self, name: str) -> AgentSpec:
        """Raises: NotFound."""
        spec = self._agents.get(name)
        if spec is None:
            raise NotFound(f"agent {name!r} not found", code="agent_not_found")
        return spec

    def list(self) -> list[AgentSpec]:
        return sorted(self._agents.values(), key=lambda s: s.name)

    def source(self, name: str) -> str:
        return "config" if name in self._config else "api"
