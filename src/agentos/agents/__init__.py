"""Agent runs: the tool loop, human approvals and durable execution (see docs/agents.md).

Their HTTP routes live in `agentos.api` (agents.py, runs.py), with every other route."""

from agentos.agents.service import RunService
from agentos.config.agents import AgentSpec, parse_agent_spec

__all__ = ["AgentSpec", "RunService", "parse_agent_spec"]
