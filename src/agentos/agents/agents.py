"""The agent registry: agents from the config file (read-only) and from the API (stored)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from agentos.agents.journal import Journal
from agentos.agents.spec import AgentSpec, parse_agent_spec, parse_config_agents, spec_to_dict
from agentos.agents.store import RunStore
from agentos.errors import Conflict, InvalidInput, NotFound


class AgentRegistry:
    def __init__(self, store: RunStore, journal: Journal, config_tables: Mapping[str, Mapping[str, Any]]) -> None:
        self._store = store
        self._journal = journal
        self._config = {spec.name: spec for spec in parse_config_agents(config_tables)}
        self._agents: dict[str, AgentSpec] = dict(self._config)

    async def load(self) -> None:
        """Bring back the agents created through the API before a restart."""
        for name, spec_json, _source in await self._store.read(self._journal.load_agents):
            if name not in self._config:
                self._agents[name] = parse_agent_spec(msgspec.json.decode(spec_json))

    async def create(self, body: Mapping[str, Any], now_ms: int) -> AgentSpec:
        """Create or replace an API-defined agent.

        Raises:
            InvalidInput: the body is not a valid agent (the message names the field).
            Conflict: an agent of that name comes from the config file.
        """
        if not isinstance(body, Mapping):
            raise InvalidInput("the body must be a JSON object describing an agent")
        spec = parse_agent_spec(body)
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
