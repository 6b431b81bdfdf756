"""JSON schemas of the request and response bodies, the `components` of the OpenAPI document,
and the pieces `agentos.api.openapi` builds its operations from (list parameters, tags).

Written by hand to match the handlers, except the agent spec's, which msgspec derives from
`AgentSpec` itself: it has a dozen fields and nested tables, and must never drift from the
parser. tests/api/test_openapi.py checks the hand-written request schemas against the structs
in `agentos.api.body`, and real answers against the response schemas (with jsonschema).
"""

from __future__ import annotations

from typing import Any

import msgspec

from agentos.agents.spec import BUILTIN_TOOLS, MAX_KNOWLEDGE_COLLECTIONS, AgentSpec
from agentos.api.body import MAX_AFTER, MAX_PAGE_LIMIT
from agentos.config import KernelConfig

_REF = "#/components/schemas/{name}"


def ref(name: str) -> dict[str, str]:
    return {"$ref": _REF.format(name=name)}


# Not only blanks: a character that is not whitespace as Python's str.strip() sees it (ECMA's \s,
# which validators use, leaves out \x1c-\x1f and \x85).
NOT_BLANK = "[^\\s\\x1c-\\x1f\\x85]"
# A turn's or a run's input, as `agentos.api.turns.check_input` takes it at kernel.max_input_chars' default.
INPUT = {"type": "string", "minLength": 1, "maxLength": KernelConfig().max_input_chars, "pattern": NOT_BLANK}


def _nullable(kind: str) -> dict[str, Any]:
    return {"type": [kind, "null"]}


def _page(item: str, cursor: dict[str, Any]) -> dict[str, Any]:
    """The shape every list shares: a page of items, and the cursor to pass as `?after=` for
    the next page (null: there is none)."""
    return {
        "type": "object",
        "required": ["data", "next_cursor"],
        "properties": {"data": {"type": "array", "items": ref(item)}, "next_cursor": cursor},
    }


def limit_param(default: int) -> dict[str, Any]:
    return {
        "name": "limit",
        "in": "query",
        "schema": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE_LIMIT, "default": default},
        "description": f"page size; anything else (0, -1, abc, over {MAX_PAGE_LIMIT}) is a 422 invalid_input",
    }


def after_param(kind: str) -> dict[str, Any]:
    schema = {"type": "integer", "minimum": 0, "maximum": MAX_AFTER} if kind == "integer" else {"type": "string"}
    return {"name": "after", "in": "query", "schema": schema, "description": "the next_cursor of the page before"}


def tag_of(path: str) -> str:
    """The group an operation is shown under on /docs."""
    if "/turn" in path or path.endswith("/ws"):
        return "turns"
    if path.startswith("/v1/runs") or path.endswith("/runs"):
        return "runs"
    for prefix, tag in (
        ("/v1/sessions", "sessions"), ("/v1/agents", "agents"), ("/v1/admin", "admin"), ("/v1/triggers", "triggers"),
    ):  # fmt: skip
        if path.startswith(prefix):
            return tag
    if path.startswith("/v1/collections"):
        return "knowledge"
    if path.startswith(("/v1/models", "/v1/chat/", "/v1/responses")):
        return "openai"
    return "server"


def tagged(paths: dict[str, Any]) -> dict[str, Any]:
    for path, item in paths.items():
        for method, operation in item.items():
            if method != "parameters":
                operation["tags"] = [tag_of(path)]
    return paths


# The groups of operations on /docs, in the order shown.
TAGS = [
    {"name": "sessions", "description": "Sessions, their transcripts and stored events"},
    {"name": "turns", "description": "Turns: streamed (SSE), whole (JSON) or over a WebSocket; last-wins"},
    {"name": "agents", "description": "Agent definitions (docs/agents.md)"},
    {"name": "runs", "description": "Background runs of an agent, their events, their human requests"},
    {"name": "admin", "description": "Tenants and their API keys (the admin scope; docs/security.md)"},
    {"name": "knowledge", "description": "Collections, documents and hybrid retrieval (docs/knowledge.md)"},
    {"name": "triggers", "description": "Signed webhooks that start runs (docs/triggers.md)"},
    {
        "name": "openai",
        "description": "The OpenAI-compatible front door: models, chat completions, responses (docs/openai.md)",
    },
    {"name": "server", "description": "Health, metrics, and this documentation"},
]


_, _SPEC_SCHEMAS = msgspec.json.schema_components([AgentSpec], ref_template=_REF)
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

_SESSIONS: dict[str, Any] = {
    "SessionCreate": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "agent": {
                **_nullable("string"),
                "description": "the agent that runs the turns; absent or null: the agent named default if"
                " one is defined, else plain chat turns",
            },
            "metadata": {"type": "object"},
        },
    },
    "Session": {
        "type": "object",
        "required": ["id", "agent", "metadata", "tenant_id", "created_at_ms"],
        "properties": {
            "id": {"type": "string"},
            "agent": {**_nullable("string"), "description": "the agent that runs the turns; null: plain chat turns"},
            "metadata": {"type": "object"},
            "tenant_id": {"type": "string"},
            "created_at_ms": {"type": "integer"},
            "active_turn": {**_nullable("string"), "description": "GET of one session only"},
        },
    },
    "SessionPage": _page("Session", _nullable("string")),
    "Message": {
        "type": "object",
        "required": ["id", "turn_id", "role", "content", "status", "created_at_ms"],
        "properties": {
            "id": {"type": "integer"},
            "turn_id": {"type": "string"},
            "role": {"enum": ["user", "assistant", "system", "tool"]},
            "content": {"type": "string"},
            "status": {"enum": ["completed", "cancelled", "failed"]},
            "usage": {"type": ["object", "null"], "additionalProperties": {"type": "integer"}},
            "created_at_ms": {"type": "integer"},
        },
    },
    "MessagePage": _page("Message", _nullable("integer")),
    "StoredEvent": {
        "type": "object",
        "required": ["id", "turn_id", "type", "data", "created_at_ms"],
        "properties": {
            "id": {"type": "integer"},
            "turn_id": {"type": "string"},
            "type": {"type": "string", "description": "turn.started, turn.completed, ... (tokens are not stored)"},
            "data": {"type": "object"},
            "created_at_ms": {"type": "integer"},
        },
    },
    "EventPage": _page("StoredEvent", _nullable("integer")),
    "TurnCancel": {
        "type": "object",
        "required": ["cancelled", "turn_id"],
        "properties": {
            "cancelled": {"type": "boolean", "description": "false: no turn was running"},
            "turn_id": {**_nullable("string"), "description": "the cancelled turn"},
        },
    },
    "TurnCreate": {
        "type": "object",
        "required": ["input"],
        "additionalProperties": False,
        "properties": {"input": INPUT},
    },
    "TurnResult": {
        "type": "object",
        "properties": {
            "turn_id": {"type": "string"},
            "session_id": {"type": "string"},
            "status": {"enum": ["completed", "cancelled", "failed"]},
            "output": {"type": "string"},
            "usage": {"type": "object"},
            "reason": {"type": "string"},
            "message": {"type": "string"},
            "finish_reason": {"type": "string"},
        },
    },
}

_RUNS: dict[str, Any] = {
    **_SPEC_SCHEMAS,
    "Agent": _AGENT,
    "AgentPage": _page("Agent", _nullable("string")),
    "RunCreate": {
        "type": "object",
        "required": ["input"],
        "additionalProperties": False,
        "properties": {
            "input": INPUT,
            "session_id": {**_nullable("string"), "description": "the session the run belongs to, if any"},
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
            "session_id": _nullable("string"),
            "parent_run_id": _nullable("string"),
            "input": {"type": "string", "description": "the run's input; in GET /v1/runs cut at 500 characters"},
            "input_truncated": {"type": "boolean", "description": "true: `input` is cut (only in GET /v1/runs)"},
            "status": _RUN_STATUS,
            "result": _nullable("string"),
            "reason": _nullable("string"),
            "created_ms": {"type": "integer"},
            "updated_ms": {"type": "integer"},
            "pending": {**ref("HumanRequest"), "description": "only while status is waiting_human"},
        },
    },
    "RunPage": _page("Run", _nullable("string")),
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
            "approve": _nullable("boolean"),
            "args_hash": {**_nullable("string"), "description": "required with approve: the request's args_hash"},
        },
    },
}

_OPS: dict[str, Any] = {
    # One event of a `text/event-stream` answer, as a client parses it (the OpenAPI 3.2 reading).
    "ServerSentEvent": {"type": "object", "properties": {k: {"type": "string"} for k in ("event", "data", "id")}},
    "Health": {
        "type": "object",
        "required": ["status"],
        "properties": {
            "status": {"enum": ["ok", "ready", "not_ready"]},
            "store": {
                "description": "/readyz: `ok`, or `unavailable` while the store cannot be reached (503);"
                " PostgreSQL is asked SELECT 1 at most once a second",
                "enum": ["ok", "unavailable"],
            },
            "sandbox": {
                "description": "/readyz: run_command's sandbox (strict; weaker: allowed by sandbox.allow_weaker;"
                " refused: commands are refused) and the parts this OS does not give",
                "type": ["object", "null"],
                "properties": {
                    "mode": {"enum": ["strict", "weaker", "refused"]},
                    "missing": {"type": "array", "items": {"type": "string"}},
                },
            },
        },
    },
}

SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["code", "message"],
                "properties": {
                    "code": {"type": "string"},
                    "message": {"type": "string"},
                    "error_id": {"type": "string", "description": "internal errors only: quote it to the operator"},
                },
            }
        },
    },
    **_SESSIONS,
    **_RUNS,
    **_OPS,
}
