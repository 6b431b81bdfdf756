"""The turn stream's part of the OpenAPI document (`agentos.api.openapi` merges it in)."""

from __future__ import annotations

from typing import Any

from agentos.api.body import MAX_AFTER
from agentos.api.openapi_parts import error as _error
from agentos.api.schema_parts import ref

_PATH = {"in": "path", "required": True, "schema": {"type": "string"}}
_EVENT_ID = {
    "type": "string",
    "pattern": "^([A-Za-z0-9_]+:)?[0-9]{1,19}$",
    "description": f"`<turn_id>:<seq>` as the turn's streams number events, or a seq (0 to {MAX_AFTER})",
}

STREAM_PATHS: dict[str, Any] = {
    "/v1/sessions/{session_id}/turns/{turn_id}/events": {
        "parameters": [
            {"name": "session_id", **_PATH},
            {"name": "turn_id", **_PATH},
            {"name": "Last-Event-ID", "in": "header", "schema": _EVENT_ID},
            {"name": "after", "in": "query", "schema": {"type": "integer", "minimum": 0, "maximum": MAX_AFTER}},
        ],
        "get": {
            "summary": "Follow a turn's events as SSE from any node, resumable after Last-Event-ID (or ?after=)",
            "responses": {
                "200": {
                    "description": (
                        "The turn's stored events after the given seq (`id:` = `<turn_id>:<seq>`), then the live"
                        " ones until turn.completed | turn.cancelled | turn.failed. Tokens are live only (no"
                        " `id:`): those sent while the client was away are not replayed. If the stream itself"
                        " fails or the turn sends nothing for a long time, the last event is `error` {code,"
                        " message}, without an id: reconnect to resume."
                    ),
                    "content": {"text/event-stream": {"schema": ref("ServerSentEvent")}},
                },
                "400": _error("Bad Last-Event-ID or after: not a seq from 0 to 2**62, or an id of another turn"),
                "404": _error("Unknown session, or no such turn in it (`turn_not_found`)"),
            },
        },
    },
}
