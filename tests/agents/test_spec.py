from __future__ import annotations

import pytest

from agentos.config.agents import AgentSpec, parse_agent_spec, parse_config_agents
from agentos.errors import ConfigError, InvalidInput


def test_defaults() -> None:
    spec = parse_agent_spec({"name": "ops"})
    assert spec.max_turns == 8 and spec.tools == ("run_command", "ask_human") and spec.token_budget == 0
    assert spec.command.timeout_s == 30.0


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"name": "ops", "max_turns": 101}, "max_turns"),
        ({"name": "ops", "max_turns": 0}, "max_turns"),
        ({"name": "ops", "token_budget": -1}, "token_budget"),
        ({"name": "ops", "tools": ["rm"]}, "tools"),
        ({"name": "ops", "approval_required": ["delegate"]}, "approval_required"),
        ({"name": "bad name"}, "name"),
        ({"name": "ops", "command": {"timeout_s": 0}}, "command.timeout_s"),
        ({"name": "ops", "mcp_servers": [{"name": "fs"}]}, "mcp_servers.0.command"),
        ({"name": "ops", "mcp_servers": [{"name": "w", "transport": "http", "url": "ftp://x"}]}, "mcp_servers.0.url"),
        ({"name": "ops", "max_turn": 3}, "max_turn"),
        ({"name": "ops", "human_timeout_s": 1e12}, "human_timeout_s"),  # bounded: a wait holds memory
        ({"name": "ops", "human_timeout_s": 0}, "human_timeout_s"),
    ],
)
def test_errors_name_the_field(data: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidInput) as info:
        parse_agent_spec(data)
    assert field in str(info.value)


def test_config_tables_raise_config_error_with_the_key() -> None:
    with pytest.raises(ConfigError, match=r"^agents\.ops\.max_turns: "):
        parse_config_agents({"ops": {"max_turns": 1000}})
    [spec] = parse_config_agents({"ops": {"system_prompt": "be careful"}})
    assert spec == AgentSpec(name="ops", system_prompt="be careful")


def test_mcp_tool_names() -> None:
    spec = parse_agent_spec(
        {
            "name": "a",
            "mcp_servers": [{"name": "fs", "command": ["x"], "idempotent_tools": ["read"]}],
            "approval_required": ["fs__write"],
        }
    )
    server = spec.mcp_server("fs__read")
    assert server is not None and server.name == "fs"
    assert spec.mcp_server("run_command") is None and spec.mcp_server("other__x") is None
