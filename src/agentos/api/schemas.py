"""JSON schemas of the request and response bodies, the `components` of the OpenAPI document
(`SCHEMAS`: sessions, turns and the server's own here; agents and runs in `.schemas_runs`), and
the tags `agentos.api.openapi` groups its operations under.

Written by hand to match the handlers, except the agent spec's (`.schemas_runs`). tests/api/test_openapi.py
checks the hand-written request schemas against the structs in `agentos.api.body`, and real
answers against the response schemas (with jsonschema).
"""

from __future__ import annotations

from typing import Any

from agentos.api.schema_parts import INPUT, nullable, page
from agentos.api.schemas_runs import RUN_SCHEMAS


def tag_of(path: str) -> str:
    """The group an operation is shown under on /docs."""
    if "/turn" in path or path.endswith("/ws"):
        return "turns"
    if path.startswith("/v1/runs") or path.endswith("/runs"):
        return "runs"
    for prefix, tag in (
        ("/v1/sessions", "sessions"),
        ("/v1/agents", "agents"),
        ("/v1/admin", "admin"),
        ("/v1/triggers", "triggers"),
    ):
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


_SESSIONS: dict[str, Any] = {
    "SessionCreate": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "agent": {
                **nullable("string"),
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
            "agent": {**nullable("string"), "description": "the agent that runs the turns; null: plain chat turns"},
            "metadata": {"type": "object"},
            "tenant_id": {"type": "string"},
            "created_at_ms": {"type": "integer"},
            "active_turn": {**nullable("string"), "description": "GET of one session only"},
        },
    },
    "SessionPage": page("Session", nullable("string")),
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
    "MessagePage": page("Message", nullable("integer")),
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
    "EventPage": page("StoredEvent", nullable("integer")),
    "TurnCancel": {
        "type": "object",
        "required": ["cancelled", "turn_id"],
        "properties": {
            "cancelled": {"type": "boolean", "description": "false: no turn was running"},
            "turn_id": {**nullable("string"), "description": "the cancelled turn"},
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
    **RUN_SCHEMAS,
    **_OPS,
}
