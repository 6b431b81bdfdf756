"""The web console's part of the OpenAPI document (`agentos.api.openapi` merges it in)."""

from __future__ import annotations

from typing import Any

from agentos.api.openapi_parts import error, json_answer
from agentos.api.schema_parts import ref

_NUMBERS = {"type": "object", "additionalProperties": {"type": "number"}}
_HISTOGRAM = {
    "type": "object",
    "required": ["le", "counts", "sum", "count"],
    "properties": {
        "le": {"type": "array", "items": {"type": "number"}, "description": "Bucket upper bounds, +Inf left out"},
        "counts": {"type": "array", "items": {"type": "number"}, "description": "Cumulative count per bound"},
        "sum": {"type": "number"},
        "count": {"type": "number", "description": "Every observation: the +Inf bucket"},
    },
}

CONSOLE_SCHEMAS: dict[str, Any] = {
    "ConsoleMe": {
        "type": "object",
        "required": ["tenant_id", "key_id", "admin", "scopes"],
        "properties": {
            "tenant_id": {"type": "string"},
            "key_id": {"type": ["string", "null"], "description": "null: an open loopback server, no key"},
            "admin": {"type": "boolean"},
            "scopes": {"type": "array", "items": {"type": "string"}},
        },
    },
    "ConsoleMetrics": {
        "type": "object",
        "required": ["t_ms", "tenant"],
        "properties": {
            "t_ms": {"type": "integer"},
            "tenant": {
                "description": "The caller's tenant now: permits_held, waiting_for_permit, turns_in_flight,"
                " active_runs",
                **_NUMBERS,
            },
            "server": {
                "description": "Admin keys only: every metric of GET /metrics, every tenant's together; gauges and"
                " counters summed over their labels (`values`), histograms cumulative (`histograms`)",
                "type": "object",
                "required": ["values", "histograms"],
                "properties": {
                    "values": _NUMBERS,
                    "histograms": {"type": "object", "additionalProperties": _HISTOGRAM},
                },
            },
        },
    },
}

_STREAM = (
    "Live only (no ids). `hello` ConsoleMe first; `metrics` ConsoleMetrics every second; `run` {run_id, type,"
    " data}: a run.* or human.* event of one of the tenant's runs (keys with runs:read); `resync` {}: events were"
    " dropped, reload; `reconnect` {} last, after server.console_stream_s: open a new stream."
)

CONSOLE_PATHS: dict[str, Any] = {
    "/v1/console/me": {
        "get": {
            "summary": "Who the key is: its tenant, its scopes, whether it is an admin's (the console's sign-in)",
            "responses": {"200": json_answer("The key's principal", "ConsoleMe")},
        }
    },
    "/v1/console/metrics": {
        "get": {
            "summary": "The console's live numbers once: the tenant's, and the server's for an admin",
            "responses": {"200": json_answer("The numbers now", "ConsoleMetrics")},
        }
    },
    "/v1/console/stream": {
        "get": {
            "summary": "The console's one event stream per browser tab (SSE): metrics, run and inbox changes",
            "responses": {
                "200": {"description": _STREAM, "content": {"text/event-stream": {"schema": ref("ServerSentEvent")}}}
            },
        }
    },
    "/console": {
        "get": {
            "summary": "The web console (docs/console.md); it signs in with an API key",
            "security": [],
            "responses": {"200": {"description": "The page", "content": {"text/html": {"schema": {"type": "string"}}}}},
        }
    },
    "/console/{asset}": {
        "parameters": [{"name": "asset", "in": "path", "required": True, "schema": {"type": "string"}}],
        "get": {
            "summary": "The console's scripts and styles (and vendored uPlot)",
            "security": [],
            "responses": {
                "200": {
                    "description": "The asset",
                    "content": {t: {"schema": {"type": "string"}} for t in ("text/javascript", "text/css")},
                },
                "404": error("Not one of the console's assets"),
            },
        },
    },
}
