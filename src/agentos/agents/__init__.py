"""Agent runs: the tool loop, human approvals and durable execution (see docs/agents.md)."""

from agentos.agents.http import RUN_SERVICE, add_routes
from agentos.agents.service import RunService
from agentos.agents.spec import AgentSpec, parse_agent_spec

__all__ = ["RUN_SERVICE", "AgentSpec", "RunService", "add_routes", "parse_agent_spec"]
