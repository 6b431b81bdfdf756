"""The OpenAPI 3.1 document served at /openapi.json, written by hand to match the handlers
(tests/api/test_openapi.py checks that every route is described, every described route exists,
and every request body matches the struct its handler reads)."""

from __future__ import annotations

import copy
from typing import Any

from agentos.api.openapi_admin import ADMIN_PATHS, ADMIN_SCHEMAS
from agentos.api.openapi_console import CONSOLE_PATHS, CONSOLE_SCHEMAS
from agentos.api.openapi_knowledge import KNOWLEDGE_PATHS, KNOWLEDGE_SCHEMAS
from agentos.api.openapi_limits import limited
from agentos.api.openapi_limits import retry_error as _retryafter_param
from agentos.api.openapi_openai import OPENAI_PATHS, OPENAI_SCHEMAS, openai_errors
from agentos.api.openapi_parts import BAD_BODY, BEARER, json_bodied, secured, store_backed
from agentos.api.openapi_parts import error as _error
from agentos.api.openapi_parts import json_answer as _json
from agentos.api.openapi_parts import json_body as _body
from agentos.api.openapi_runs import RUN_LIST_PATHS, RUN_PATHS
from agentos.api.openapi_streams import STREAM_PATHS
from agentos.api.openapi_triggers import TRIGGER_PATHS, TRIGGER_SCHEMAS
from agentos.api.schema_parts import after_param, limit_param, ref
from agentos.api.schemas import SCHEMAS, TAGS, tagged


def _text(description: str, media_type: str) -> dict[str, Any]:
    return {"description": description, "content": {media_type: {"schema": {"type": "string"}}}}


_BAD_BODY = BAD_BODY
_SESSION_ID = {"name": "session_id", "in": "path", "required": True, "schema": {"type": "string"}}
_NAME = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
_PAGE = [limit_param(100), after_param("integer")]
_BAD_QUERY = {"422": _error("A bad limit or after; the message names the parameter")}

OPENAPI: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {
        "title": "Agent OS",
        "version": "0.1.0",
        "description": (
            "Sessions, streamed turns, agents and their runs. Errors are `{error: {code, message}}`;"
            " lists are `{data, next_cursor}`. The WebSocket protocol and the event streams are in docs/api.md."
        ),
    },
    "tags": TAGS,
    "paths": tagged(
        {
            "/v1/sessions": {
                "post": {
                    "summary": "Open a session",
                    "requestBody": {"content": {"application/json": {"schema": ref("SessionCreate")}}},
                    "responses": {
                        "201": _json("The session", "Session"),
                        **_BAD_BODY,
                        "404": _error("`agent_not_found`: no agent of that name this tenant can run"),
                    },
                },
                "get": {
                    "summary": "List sessions",
                    "parameters": [
                        limit_param(50),
                        after_param("string"),
                        {
                            "name": "agent",
                            "in": "query",
                            "schema": {"type": "string"},
                            "description": "only sessions opened with this agent (`default`: opened without one)",
                        },
                    ],
                    "responses": {"200": _json("A page of sessions, oldest first", "SessionPage"), **_BAD_QUERY},
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
                                "text/event-stream": {"schema": ref("ServerSentEvent")},
                                "application/json": {"schema": ref("TurnResult")},
                            },
                        },
                        **_BAD_BODY,
                        "404": _error("Unknown session"),
                        "406": _error("Unsupported Accept"),
                        "429": _retryafter_param(
                            "Over the admission limit (`overloaded`) or the tenant's concurrent turns"
                            " (`tenant_concurrent_turns`)"
                        ),
                        "503": _retryafter_param("Draining: the server starts no new turns"),
                    },
                },
            },
            "/v1/sessions/{session_id}/turn": {
                "parameters": [_SESSION_ID],
                "delete": {
                    "summary": "Cancel the running turn",
                    "responses": {
                        "200": _json("Whether a turn was running", "TurnCancel"),
                        "404": _error("Unknown session"),
                    },
                },
            },
            "/v1/sessions/{session_id}/messages": {
                "parameters": [_SESSION_ID, *_PAGE],
                "get": {
                    "summary": "The transcript, cursor-paginated",
                    "responses": {
                        "200": _json("A page of messages", "MessagePage"),
                        **_BAD_QUERY,
                        "404": _error("Unknown session"),
                    },
                },
            },
            "/v1/sessions/{session_id}/events": {
                "parameters": [_SESSION_ID, *_PAGE],
                "get": {
                    "summary": "Stored turn events, cursor-paginated",
                    "responses": {
                        "200": _json("A page of events", "EventPage"),
                        **_BAD_QUERY,
                        "404": _error("Unknown session"),
                    },
                },
            },
            "/v1/sessions/{session_id}/ws": {
                "parameters": [_SESSION_ID],
                "get": {
                    "summary": "A WebSocket for the session's turns",
                    "description": (
                        "Frames in: `{type: turn, input}`, `{type: cancel}`. Frames out: the turn events as"
                        " `{type, id, data}`, and `{type: error, error: {code, message, retry_after_s?}}` for a"
                        " refused frame. A turn cancelled before it started may end without `turn.started`."
                        " docs/api.md has every frame and error code."
                    ),
                    "responses": {
                        "101": {"description": "Switching protocols"},
                        "400": _error("Not a WebSocket upgrade (a plain GET, or a bad Sec-WebSocket-* header)"),
                        "404": _error("Unknown session"),
                    },
                },
            },
            "/v1/agents": {
                "post": {
                    "summary": "Create or replace an agent (docs/agents.md)",
                    "requestBody": _body("AgentSpec"),
                    "responses": {
                        "201": _json("The agent", "Agent"),
                        **_BAD_BODY,
                        "403": _error("Asks for what an API caller may not have (docs/security.md)"),
                        "409": _error("A config agent"),
                    },
                },
                "get": {
                    "summary": "List agents, by name",
                    "parameters": [limit_param(100), after_param("string")],
                    "responses": {"200": _json("A page of agents", "AgentPage"), **_BAD_QUERY},
                },
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
                        "429": _retryafter_param(
                            "Over `kernel.max_active_runs` (`overloaded`) or the tenant's active runs"
                            " (`tenant_active_runs`)"
                        ),
                        "503": _retryafter_param("Draining: the server starts no new runs"),
                    },
                },
            },
            **RUN_LIST_PATHS,
            **RUN_PATHS,
            **STREAM_PATHS,
            **ADMIN_PATHS,
            **KNOWLEDGE_PATHS,
            **TRIGGER_PATHS,
            **copy.deepcopy(OPENAI_PATHS),
            **CONSOLE_PATHS,
            "/healthz": {"get": {"summary": "Liveness", "security": [], "responses": {"200": _json("ok", "Health")}}},
            "/readyz": {
                "get": {
                    "summary": "Readiness",
                    "security": [],
                    "responses": {"200": _json("ready", "Health"), "503": _json("not ready", "Health")},
                }
            },
            "/metrics": {
                "get": {
                    "summary": "Prometheus metrics",
                    "responses": {"200": _text("text exposition format", "text/plain")},
                }
            },
            "/openapi.json": {
                "get": {
                    "summary": "This document",
                    "security": [],
                    "responses": {
                        "200": {
                            "description": "OpenAPI 3.1",
                            "content": {"application/json": {"schema": {"type": "object"}}},
                        }
                    },
                }
            },
            "/docs": {
                "get": {
                    "summary": "This page: the document, browsable, with requests you can try",
                    "security": [],
                    "responses": {"200": _text("The page", "text/html")},
                }
            },
            "/docs/{asset}": {
                "parameters": [{"name": "asset", "in": "path", "required": True, "schema": {"type": "string"}}],
                "get": {
                    "summary": "The page's scripts and styles (vendored Swagger UI)",
                    "security": [],
                    "responses": {
                        "200": {
                            "description": "The asset",
                            "content": {
                                t: {"schema": {"type": "string"}} for t in ("text/javascript", "text/css", "text/plain")
                            },
                        },
                        "404": _error("Not one of the page's assets"),
                    },
                },
            },
        }
    ),
    "components": {
        "securitySchemes": {"bearer": BEARER},
        "schemas": {
            **SCHEMAS,
            **ADMIN_SCHEMAS,
            **KNOWLEDGE_SCHEMAS,
            **TRIGGER_SCHEMAS,
            **OPENAI_SCHEMAS,
            **CONSOLE_SCHEMAS,
        },
    },
    "security": [{"bearer": []}],
}
# after the dict: `security` decides the 401 and 429; the OpenAI routes answer every error in their own shape
openai_errors(limited(secured(json_bodied(store_backed(OPENAPI["paths"])))))
