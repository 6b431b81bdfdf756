"""JSON schemas of agents and runs: the agent spec (derived by msgspec from `AgentSpec` itself: it
has a dozen fields and nested tables, and must never drift from the parser), runs, their human
requests and answers. Part of `agentos.api.schemas.SCHEMAS`.
"""

from __future__ import annotations

from typing import Any

import msgspec

from agentos.api.schema_parts import INPUT, REF_TEMPLATE, nullable, page, ref
from agentos.config.agents import BUILTIN_TOOLS, MAX_KNOWLEDGE_COLLECTIONS, AgentSpec

_, _SPEC_SCHEMAS = msgspec.json.schema_components([AgentSpec], ref_template=REF_TEMPLATE)
_SPEC = _SPEC_SCHEMAS["AgentSpec"]
# What parse_agent_spec checks beyond the struct's types, where JSON Schema can say it.
_SPEC["properties"]["name"]["pattern"] = "^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"
_SPEC["properties"]["tools"]["items"] = {"enum": list(BUILTIN_TOOLS)}
_SPEC["properties"]["knowledge"] |= {
    "items": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"},
    "maxItems": MAX_KNOWLEDGE_COLLECTIONS,
    "uniqueItems": True,
}
_SPEC_SCHEMAS["McpServerSpec"]["properties"]["name"] |= {  # the agent name's pattern, without "__"
    "pattern": "^[A-Za-z0-9]([A-Za-z0-9-]|_[A-Za-z0-9-])*_?$",
    "maxLength": 64,
}

_AGENT = {
    "title": "Agent",
    "type": "object",
    "required": [*_SPEC["required"], "source"],
    "properties": {
        **_SPEC["properties"],
        "source": {"enum": ["config", "api"], "description": "config agents cannot be replaced over the API"},
    },
}

_RUN_STATUS = {"enum": ["queued", "running", "waiting_human", "completed", "failed", "cancelled"]}

RUN_SCHEMAS: dict[str, Any] = {
    **_SPEC_SCHEMAS,
    "Agent": _AGENT,
    "AgentPage": page("Agent", nullable("string")),
    "RunCreate": {
        "type": "object",
        "required": ["input"],
        "additionalProperties": False,
        "properties": {
            "input": INPUT,
            "session_id": {**nullable("string"), "description": "the session the run belongs to, if any"},
        },
    },
    "RunStarted": {
        "type": "object",
        "required": ["run_id", "status", "run_url", "events_url"],
        "properties": {
            "run_id": {"type": "string"},
            "status": {"const": "queued"},
            "run_url": {"type": "string"},
            "events_url": {"type": "string"},
        },
    },
    "Run": {
        "type": "object",
        "required": ["run_id", "agent", "input", "input_truncated", "status", "created_ms", "updated_ms"],
        "properties": {
            "run_id": {"type": "string"},
            "agent": {"type": "string"},
            "session_id": nullable("string"),
            "parent_run_id": nullable("string"),
            "input": {"type": "string", "description": "the run's input; in GET /v1/runs cut at 500 characters"},
            "input_truncated": {"type": "boolean", "description": "true: `input` is cut (only in GET /v1/runs)"},
            "status": _RUN_STATUS,
            "result": nullable("string"),
            "reason": nullable("string"),
            "created_ms": {"type": "integer"},
            "updated_ms": {"type": "integer"},
            "pending": {**ref("HumanRequest"), "description": "only while status is waiting_human"},
        },
    },
    "RunPage": page("Run", nullable("string")),
    "HumanRequest": {
        "type": "object",
        "required": ["operation_id", "kind"],
        "properties": {
            "operation_id": {"type": "string"},
            "kind": {"enum": ["question", "approval", "uncertain"]},
            "args_hash": {"type": "string", "description": "an approval must quote it"},
            "deadline_ms": {"type": "integer"},
            "question": {"type": "string"},
            "tool": {"type": "string"},
            "arguments": {
                "type": "string",
                "description": "the tool's arguments as the model sent them (JSON text); args_hash is their hash",
            },
            "call_id": {"type": "string"},
            "operation_id_uncertain": {"type": "string", "description": "uncertain: the tool call in doubt"},
        },
    },
    "AnswerCreate": {
        "type": "object",
        "required": ["operation_id"],
        "additionalProperties": False,
        "properties": {
            "operation_id": {"type": "string"},
            "answer": {"type": "string"},
            "approve": nullable("boolean"),
            "args_hash": {**nullable("string"), "description": "required with approve: the request's args_hash"},
        },
    },
}
