"""The OpenAPI 3.1 document served at /openapi.json, written by hand to match the handlers
(tests/api check that every route is described and every described route exists)."""

from __future__ import annotations

from typing import Any


def _error(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }


def _json(description: str, ref: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{ref}"}}},
    }


_SESSION_ID = {"name": "session_id", "in": "path", "required": True, "schema": {"type": "string"}}
_NAME = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
_RUN_ID = {"name": "run_id", "in": "path", "required": True, "schema": {"type": "string"}}
_PAGE = [
    {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1}},
    {"name": "after", "in": "query", "schema": {"type": "integer", "minimum": 0}, "description": "cursor"},
]

OPENAPI: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "Agent OS", "version": "0.1.0"},
    "paths": {
        "/v1/sessions": {
            "post": {
                "summary": "Open a session",
                "requestBody": {
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/SessionCreate"}}}
                },
                "responses": {
                    "201": _json("The session", "Session"),
                    "400": _error("Malformed JSON"),
                    "422": _error("Wrong types"),
                },
            },
            "get": {
                "summary": "List sessions",
                "parameters": [
                    {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 500}},
                    {"name": "after", "in": "query", "schema": {"type": "string"}, "description": "cursor"},
                ],
                "responses": {"200": _json("A page of sessions", "SessionPage")},
            },
        },
        "/v1/sessions/{session_id}": {
            "parameters": [_SESSION_ID],
            "get": {
                "summary": "Read a session",
                "responses": {"200": _json("The session", "Session"), "404": _error("Unknown session")},
            },
            "delete": {
                "summary": "Delete a session and its transcript",
                "responses": {"204": {"description": "Deleted"}, "404": _error("Unknown session")},
            },
        },
        "/v1/sessions/{session_id}/turns": {
            "parameters": [_SESSION_ID],
            "post": {
                "summary": "Send a turn; a running turn of the session is cancelled (last-wins)",
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/TurnCreate"}}},
                },
                "responses": {
                    "200": {
                        "description": (
                            "`text/event-stream`: events turn.started, token, then turn.completed | turn.cancelled"
                            " | turn.failed. `application/json`: the whole turn."
                        ),
                        "content": {
                            "text/event-stream": {"schema": {"type": "string"}},
                            "application/json": {"schema": {"$ref": "#/components/schemas/TurnResult"}},
                        },
                    },
                    "400": _error("Malformed JSON"),
                    "404": _error("Unknown session"),
                    "406": _error("Unsupported Accept"),
                    "413": _error("Body over the limit"),
                    "422": _error("Wrong types"),
                    "429": {
                        **_error("Over the admission limit"),
                        "headers": {"Retry-After": {"schema": {"type": "integer"}}},
                    },
                },
            },
        },
        "/v1/sessions/{session_id}/turn": {
            "parameters": [_SESSION_ID],
            "delete": {
                "summary": "Cancel the running turn",
                "responses": {"200": {"description": "{cancelled, turn_id}"}, "404": _error("Unknown session")},
            },
        },
        "/v1/sessions/{session_id}/messages": {
            "parameters": [_SESSION_ID, *_PAGE],
            "get": {
                "summary": "The transcript, cursor-paginated",
                "responses": {"200": {"description": "{data, next_cursor}"}, "404": _error("Unknown session")},
            },
        },
        "/v1/sessions/{session_id}/events": {
            "parameters": [_SESSION_ID, *_PAGE],
            "get": {
                "summary": "Stored turn events, cursor-paginated",
                "responses": {"200": {"description": "{data, next_cursor}"}, "404": _error("Unknown session")},
            },
        },
        "/v1/sessions/{session_id}/ws": {
            "parameters": [_SESSION_ID],
            "get": {
                "summary": "WebSocket: {type: turn, input} and {type: cancel} in; {type, id, data} events out",
                "responses": {"101": {"description": "Switching protocols"}, "404": _error("Unknown session")},
            },
        },
        "/v1/agents": {
            "post": {
                "summary": "Create or replace an agent (docs/agents.md)",
                "responses": {
                    "201": {"description": "The agent"},
                    "409": _error("A config agent"),
                    "422": _error("Bad field"),
                },
            },
            "get": {"summary": "List agents", "responses": {"200": {"description": "{data}"}}},
        },
        "/v1/agents/{name}": {
            "parameters": [_NAME],
            "get": {
                "summary": "Read an agent",
                "responses": {"200": {"description": "The agent"}, "404": _error("Unknown agent")},
            },
        },
        "/v1/agents/{name}/runs": {
            "parameters": [_NAME],
            "post": {
                "summary": "Start a background run: {input, session_id?}",
                "responses": {
                    "202": {"description": "{run_id, status, run_url, events_url}"},
                    "404": _error("Unknown agent"),
                },
            },
        },
        "/v1/runs/{run_id}": {
            "parameters": [_RUN_ID],
            "get": {
                "summary": "A run's status, result and pending human request",
                "responses": {"200": {"description": "The run"}, "404": _error("Unknown run")},
            },
        },
        "/v1/runs/{run_id}/events": {
            "parameters": [_RUN_ID],
            "get": {
                "summary": "The run's events as SSE, resumable with Last-Event-ID",
                "responses": {"200": {"description": "text/event-stream"}, "404": _error("Unknown run")},
            },
        },
        "/v1/runs/{run_id}/cancel": {
            "parameters": [_RUN_ID],
            "post": {
                "summary": "Soft cancel: the loop stops at its next step",
                "responses": {"200": {"description": "The run"}, "404": _error("Unknown run")},
            },
        },
        "/v1/runs/{run_id}/terminate": {
            "parameters": [_RUN_ID],
            "post": {
                "summary": "Hard stop in every state; records run.cancelled",
                "responses": {"200": {"description": "The run"}, "404": _error("Unknown run")},
            },
        },
        "/v1/runs/{run_id}/answer": {
            "parameters": [_RUN_ID],
            "post": {
                "summary": "Answer a human request: {operation_id, answer?, approve?, args_hash?}",
                "responses": {
                    "200": {"description": "The run"},
                    "409": _error("Not waiting, or the hash does not match"),
                    "422": _error("Bad body"),
                },
            },
        },
        "/healthz": {"get": {"summary": "Liveness", "responses": {"200": {"description": "ok"}}}},
        "/readyz": {
            "get": {
                "summary": "Readiness",
                "responses": {"200": {"description": "ready"}, "503": {"description": "starting or draining"}},
            }
        },
        "/metrics": {
            "get": {"summary": "Prometheus metrics", "responses": {"200": {"description": "text exposition format"}}}
        },
        "/openapi.json": {"get": {"summary": "This document", "responses": {"200": {"description": "OpenAPI 3.1"}}}},
    },
    "components": {
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        "schemas": {
            "Error": {
                "type": "object",
                "required": ["error"],
                "properties": {
                    "error": {
                        "type": "object",
                        "required": ["code", "message"],
                        "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
                    }
                },
            },
            "SessionCreate": {
                "type": "object",
                "additionalProperties": False,
                "properties": {"agent": {"type": "string"}, "metadata": {"type": "object"}},
            },
            "Session": {
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "agent": {"type": "string"},
                    "metadata": {"type": "object"},
                    "tenant_id": {"type": "string"},
                    "created_at_ms": {"type": "integer"},
                    "active_turn": {"type": ["string", "null"]},
                },
            },
            "SessionPage": {
                "type": "object",
                "properties": {
                    "data": {"type": "array", "items": {"$ref": "#/components/schemas/Session"}},
                    "next_cursor": {"type": ["string", "null"]},
                },
            },
            "TurnCreate": {
                "type": "object",
                "required": ["input"],
                "additionalProperties": False,
                "properties": {"input": {"type": "string", "minLength": 1}},
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
                },
            },
        },
    },
    "security": [{"bearer": []}],
}
