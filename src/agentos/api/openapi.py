"""The OpenAPI 3.1 document served at /openapi.json, written by hand to match the handlers
(tests/api/test_openapi.py checks that every route is described, every described route exists,
and every request body matches the struct its handler reads)."""

from __future__ import annotations

from typing import Any

from agentos.api.schemas import SCHEMAS, ref


def _error(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": ref("Error")}}}


def _json(description: str, schema: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": ref(schema)}}}


def _body(schema: str) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": ref(schema)}}}


def _retry_after(description: str) -> dict[str, Any]:
    return {**_error(description), "headers": {"Retry-After": {"schema": {"type": "integer"}}}}


_BAD_BODY = {
    "400": _error("Malformed JSON"),
    "413": _error("Body over the limit"),
    "422": _error("Wrong types or values; the message names the field"),
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
                "requestBody": {"content": {"application/json": {"schema": ref("SessionCreate")}}},
                "responses": {"201": _json("The session", "Session"), **_BAD_BODY},
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
                "requestBody": _body("TurnCreate"),
                "responses": {
                    "200": {
                        "description": (
                            "`text/event-stream`: events turn.started, token, then turn.completed | turn.cancelled"
                            " | turn.failed. `application/json`: the whole turn."
                        ),
                        "content": {
                            "text/event-stream": {"schema": {"type": "string"}},
                            "application/json": {"schema": ref("TurnResult")},
                        },
                    },
                    **_BAD_BODY,
                    "404": _error("Unknown session"),
                    "406": _error("Unsupported Accept"),
                    "429": _retry_after("Over the admission limit"),
                    "503": _retry_after("Draining: the server starts no new turns"),
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
                "summary": (
                    "WebSocket: {type: turn, input} and {type: cancel} in; {type, id, data} events out;"
                    " {type: error, error: {code, message}} for a refused frame (code shutting_down while draining)"
                ),
                "responses": {"101": {"description": "Switching protocols"}, "404": _error("Unknown session")},
            },
        },
        "/v1/agents": {
            "post": {
                "summary": "Create or replace an agent (docs/agents.md)",
                "requestBody": _body("AgentSpec"),
                "responses": {
                    "201": _json("The agent", "Agent"),
                    **_BAD_BODY,
                    "409": _error("A config agent"),
                },
            },
            "get": {"summary": "List agents", "responses": {"200": _json("Every agent", "AgentList")}},
        },
        "/v1/agents/{name}": {
            "parameters": [_NAME],
            "get": {
                "summary": "Read an agent",
                "responses": {"200": _json("The agent", "Agent"), "404": _error("Unknown agent")},
            },
        },
        "/v1/agents/{name}/runs": {
            "parameters": [_NAME],
            "post": {
                "summary": "Start a background run of the agent",
                "requestBody": _body("RunCreate"),
                "responses": {
                    "202": _json("Queued", "RunStarted"),
                    **_BAD_BODY,
                    "404": _error("Unknown agent"),
                    "503": _retry_after("Draining: the server starts no new runs"),
                },
            },
        },
        "/v1/runs/{run_id}": {
            "parameters": [_RUN_ID],
            "get": {
                "summary": "A run's status, result and pending human request",
                "responses": {"200": _json("The run", "Run"), "404": _error("Unknown run")},
            },
        },
        "/v1/runs/{run_id}/events": {
            "parameters": [
                _RUN_ID,
                {"name": "Last-Event-ID", "in": "header", "schema": {"type": "integer", "minimum": 0}},
                {"name": "after", "in": "query", "schema": {"type": "integer", "minimum": 0}},
            ],
            "get": {
                "summary": "The run's events as SSE (`id:` = seq), resumable after Last-Event-ID (or ?after=)",
                "responses": {
                    "200": {
                        "description": (
                            "run.started, token, tool.call, tool.result, human.requested, human.answered, then"
                            " run.completed | run.failed | run.cancelled. If the stream itself fails, its last"
                            " event is `error` {code, message, error_id}, without an id: reconnect to resume."
                        ),
                        "content": {"text/event-stream": {"schema": {"type": "string"}}},
                    },
                    "400": _error("Bad Last-Event-ID"),
                    "404": _error("Unknown run"),
                },
            },
        },
        "/v1/runs/{run_id}/cancel": {
            "parameters": [_RUN_ID],
            "post": {
                "summary": "Soft cancel: the loop stops at its next step",
                "responses": {"200": _json("The run", "Run"), "404": _error("Unknown run")},
            },
        },
        "/v1/runs/{run_id}/terminate": {
            "parameters": [_RUN_ID],
            "post": {
                "summary": "Hard stop in every state; records run.cancelled",
                "responses": {"200": _json("The run", "Run"), "404": _error("Unknown run")},
            },
        },
        "/v1/runs/{run_id}/answer": {
            "parameters": [_RUN_ID],
            "post": {
                "summary": "Answer the run's human request",
                "requestBody": _body("AnswerCreate"),
                "responses": {
                    "200": _json("The run", "Run"),
                    **_BAD_BODY,
                    "404": _error("Unknown run"),
                    "409": _error("Not waiting, or the hash does not match"),
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
        "schemas": SCHEMAS,
    },
    "security": [{"bearer": []}],
}
