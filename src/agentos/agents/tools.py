"""The built-in tools as OpenAI tool schemas, and which tools may be retried after a crash."""

from __future__ import annotations

from typing import Any

from agentos.config.agents import SEARCH_KNOWLEDGE, AgentSpec

ToolSchema = dict[str, Any]


def _function(name: str, description: str, properties: dict[str, Any], required: list[str]) -> ToolSchema:
    parameters = {"type": "object", "properties": properties, "required": required}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


BUILTIN_SCHEMAS: dict[str, ToolSchema] = {
    "run_command": _function(
        "run_command",
        "Run a program in the run's sandboxed working directory, without network. Returns its exit code,"
        " stdout and stderr (truncated when long).",
        {"command": {"type": "array", "items": {"type": "string"}, "description": 'argv, e.g. ["ls", "-l"]'}},
        ["command"],
    ),
    "ask_human": _function(
        "ask_human",
        "Ask a human a question and wait for the answer.",
        {"question": {"type": "string"}},
        ["question"],
    ),
    "delegate": _function(
        "delegate",
        "Hand a sub-task to an agent (this one by default) as a child run and get its answer.",
        {"input": {"type": "string"}, "agent": {"type": "string"}},
        ["input"],
    ),
    SEARCH_KNOWLEDGE: _function(
        SEARCH_KNOWLEDGE,
        "Search the documents of this agent's knowledge collections. Returns numbered excerpts with"
        " their source; cite the ones you use as [n].",
        {
            "query": {"type": "string", "description": "what to look for, in words"},
            "top_k": {"type": "integer", "minimum": 1, "maximum": 20, "description": "excerpts wanted (default 5)"},
        },
        ["query"],
    ),
}

# delegate is idempotent by construction: the child's run id is derived from the step, so a
# retry finds the child it already started instead of starting a second one. A knowledge search
# only reads.
_IDEMPOTENT_BUILTINS = frozenset({"delegate", SEARCH_KNOWLEDGE})


def builtin_schemas(spec: AgentSpec) -> list[ToolSchema]:
    schemas = [BUILTIN_SCHEMAS[name] for name in spec.tools]
    if spec.knowledge:
        schemas.append(BUILTIN_SCHEMAS[SEARCH_KNOWLEDGE])
    return schemas


def is_idempotent(spec: AgentSpec, tool_name: str) -> bool:
    """Whether a call whose outcome is unknown (the server died during it) may simply run again."""
    if tool_name in _IDEMPOTENT_BUILTINS:
        return True
    server = spec.mcp_server(tool_name)
    return server is not None and tool_name.partition("__")[2] in server.idempotent_tools
