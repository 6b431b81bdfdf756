"""The runs' part of the OpenAPI document: the list and each run's routes (`agentos.api.openapi`
merges them in)."""

from __future__ import annotations

from typing import Any

from agentos.api.body import MAX_AFTER
from agentos.api.openapi_parts import BAD_BODY
from agentos.api.openapi_parts import error as _error
from agentos.api.openapi_parts import json_answer as _json
from agentos.api.openapi_parts import json_body as _body
from agentos.api.schema_parts import limit_param, ref
from agentos.journal.run_list import CURSOR_PATTERN, RUN_STATUSES


def _filter(name: str, description: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": name, "in": "query", "schema": schema or {"type": "string"}, "description": description}


_AFTER = {
    "type": "string",
    "pattern": CURSOR_PATTERN,
    "description": "the next_cursor of the page before: `<created_ms>:<run_id>` of its last run",
}

RUN_LIST_PATHS: dict[str, Any] = {
    "/v1/runs": {
        "get": {
            "summary": "List the tenant's runs, newest first; status=waiting_human is the inbox",
            "parameters": [
                _filter("status", "only runs in this status", {"type": "string", "enum": list(RUN_STATUSES)}),
                _filter("agent", "only runs of this agent"),
                _filter("session_id", "only runs of this session"),
                limit_param(50),
                {"name": "after", "in": "query", "schema": _AFTER, "description": _AFTER["description"]},
            ],
            "responses": {
                "200": _json(
                    "A page of runs, newest first (by created_ms, then run_id); a waiting run carries its"
                    " `pending` request, what POST /v1/runs/{run_id}/answer needs",
                    "RunPage",
                ),
                "422": _error("A bad limit, status or after (not a next_cursor); the message names the parameter"),
            },
        },
    },
}

_RUN_ID = {"name": "run_id", "in": "path", "required": True, "schema": {"type": "string"}}
_SEQ = {"type": "integer", "minimum": 0, "maximum": MAX_AFTER}

RUN_PATHS: dict[str, Any] = {
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
            {"name": "Last-Event-ID", "in": "header", "schema": _SEQ},
            {"name": "after", "in": "query", "schema": _SEQ},
        ],
        "get": {
            "summary": "The run's events as SSE (`id:` = seq), resumable after Last-Event-ID (or ?after=)",
            "responses": {
                "200": {
                    "description": (
                        "run.started, model.started, token, model.completed, tool.call, tool.result,"
                        " human.requested, human.answered, then run.completed | run.failed | run.cancelled"
                        " (docs/agents.md, the event table). Every event but token is journaled and its data"
                        " carries `at_ms`, when it was (ms since the epoch); ignore event types you do not"
                        " know. If the stream itself fails, its last event is `error` {code, message,"
                        " error_id}, without an id: reconnect to resume."
                    ),
                    "content": {"text/event-stream": {"schema": ref("ServerSentEvent")}},
                },
                "400": _error("Bad Last-Event-ID or after: not an integer from 0 to 2**62"),
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
                **BAD_BODY,
                "404": _error("Unknown run"),
                "409": _error("Not waiting, or the hash does not match"),
            },
        },
    },
}
