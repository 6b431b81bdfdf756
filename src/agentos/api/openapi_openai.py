"""The OpenAI-compatible routes' part of the OpenAPI document (`agentos.api.openapi` merges it in).

The request bodies are generated from the structs the handlers read (sampling fields a client
may send are accepted and not listed); the answers are written by hand, as much of OpenAI's
objects as Agent OS fills. Every error of these routes is `OpenAIError` (`openai_errors`, applied
after the shared builders documented the 401/403/429/503 every operation has), and a 422 is
answered as 400 (`agentos.api.openai_errors`).
"""

from __future__ import annotations

from typing import Any

import msgspec

from agentos.api.openai_wire import ChatCompletionCreate, ResponseCreate
from agentos.api.openapi_parts import error as _native_error
from agentos.api.schema_parts import ref

_REF = "#/components/schemas/{name}"
PATHS_PREFIXES = ("/v1/models", "/v1/chat/completions", "/v1/responses")
_OPENAI_ERROR = {"application/json": {"schema": ref("OpenAIError")}}
_SESSION = {"X-Session-Id": {"description": "The session the turn ran in", "schema": {"type": "string"}}}
_SESSION_PARAM = {
    "name": "X-Session-Id",
    "in": "header",
    "schema": {"type": "string"},
    "description": "Continue this session of the caller: the last message is the new turn (docs/openai.md)",
}
_RID = {"name": "response_id", "in": "path", "required": True, "schema": {"type": "string"}}
_BAD = {
    "400": _native_error("Malformed JSON, wrong types, or what the route does not support; `param` names the field"),
    "413": _native_error("Body over the limit"),
}
_RETRY_AFTER_60 = {
    "description": "Seconds to wait before trying again; at most 60, the most the OpenAI SDKs wait for",
    "schema": {"type": "integer", "minimum": 1, "maximum": 60},
}
_STREAM = {"text/event-stream": {"schema": ref("ServerSentEvent")}}


def _answer(description: str, schema: str, streamed: str | None = None) -> dict[str, Any]:
    content: dict[str, Any] = {"application/json": {"schema": ref(schema)}}
    if streamed is not None:
        content |= _STREAM
        description = f"{description}; with `stream: true`, {streamed}"
    return {"description": description, "content": content, "headers": dict(_SESSION)}


_TURN_ERRORS = {
    "404": _native_error("`model_not_found`: no agent (or plain model) of that id for the caller; an unknown session"),
    "409": {
        **_native_error("The turn was superseded or cancelled (last-wins), or a branch from an older response"),
        "headers": {"x-should-retry": {"schema": {"enum": ["false"]}, "description": "never retry: last-wins"}},
    },
    "429": _native_error("Over the admission limit or a rate limit; Retry-After is at most 60"),
    "500": _native_error("The turn failed inside the server (an agent's run failed)"),
    "502": _native_error("The provider failed the turn"),
}

OPENAI_PATHS: dict[str, Any] = {
    "/v1/models": {
        "get": {
            "summary": "The caller's agents, and the provider's model for plain chat turns, as OpenAI models",
            "responses": {
                "200": {"description": "The models", "content": {"application/json": {"schema": ref("ModelList")}}}
            },
        }
    },
    "/v1/chat/completions": {
        "post": {
            "summary": "A turn of a session as an OpenAI chat completion (docs/openai.md)",
            "parameters": [_SESSION_PARAM],
            "requestBody": {"required": True, "content": {"application/json": {"schema": ref("ChatCompletionCreate")}}},
            "responses": {
                "200": _answer("The completion", "ChatCompletion", "`chat.completion.chunk` data lines, then [DONE]"),
                **_BAD,
                **_TURN_ERRORS,
            },
        }
    },
    "/v1/responses": {
        "post": {
            "summary": "A turn as an OpenAI response; previous_response_id continues its session",
            "requestBody": {"required": True, "content": {"application/json": {"schema": ref("ResponseCreate")}}},
            "responses": {
                "200": _answer("The response", "OpenAIResponse", "the Responses API's events"),
                **_BAD,
                **_TURN_ERRORS,
                "404": _native_error("`model_not_found`, or `previous_response_not_found`"),
            },
        }
    },
    "/v1/responses/{response_id}": {
        "parameters": [_RID],
        "get": {
            "summary": "A response: its turn's answer and how the turn ended",
            "responses": {
                "200": {
                    "description": "The response",
                    "content": {"application/json": {"schema": ref("OpenAIResponse")}},
                },
                "404": _native_error("`response_not_found` (also another tenant's)"),
            },
        },
    },
}


def _bodies() -> dict[str, Any]:
    _, schemas = msgspec.json.schema_components([ChatCompletionCreate, ResponseCreate], ref_template=_REF)
    chat = schemas["ChatCompletionCreate"]["properties"]
    chat["messages"]["minItems"] = 1
    chat["n"] |= {"minimum": 1, "maximum": 1}
    return dict(schemas)


_NULLABLE_TEXT = {"type": ["string", "null"]}
# Fields of OpenAI's response object that Agent OS answers with one fixed value each.
_FIXED_RESPONSE_FIELDS = {
    "incomplete_details": {"type": "null"},
    "instructions": {"type": "null"},
    "metadata": {"type": "object"},
    "parallel_tool_calls": {"const": False},
    "store": {"const": True},
    "temperature": {"type": "null"},
    "text": {"type": "object"},
    "tool_choice": {"const": "auto"},
    "tools": {"type": "array", "maxItems": 0},
    "top_p": {"type": "null"},
    "truncation": {"const": "disabled"},
}
OPENAI_SCHEMAS: dict[str, Any] = {
    **_bodies(),
    "OpenAIError": {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["message", "type", "param", "code"],
                "properties": {
                    "message": {"type": "string"},
                    "type": {"type": "string"},
                    "param": _NULLABLE_TEXT,
                    "code": _NULLABLE_TEXT,
                },
            }
        },
    },
    "ModelList": {
        "type": "object",
        "required": ["object", "data"],
        "properties": {
            "object": {"const": "list"},
            "data": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["id", "object", "created", "owned_by"],
                    "properties": {
                        "id": {"type": "string"},
                        "object": {"const": "model"},
                        "created": {"type": "integer"},
                        "owned_by": {"type": "string"},
                    },
                },
            },
        },
    },
    "ChatCompletion": {
        "type": "object",
        "required": ["id", "object", "created", "model", "choices", "usage"],
        "properties": {
            "id": {"type": "string"},
            "object": {"const": "chat.completion"},
            "created": {"type": "integer"},
            "model": {"type": "string"},
            "choices": {
                "type": "array",
                "items": {"type": "object", "required": ["index", "message", "finish_reason"]},
            },
            "usage": {"type": "object", "required": ["prompt_tokens", "completion_tokens", "total_tokens"]},
        },
    },
    "OpenAIResponse": {
        "type": "object",
        "required": ["id", "object", "created_at", "status", "model", "output"],
        "properties": {
            "id": {"type": "string"},
            "object": {"const": "response"},
            "created_at": {"type": "integer"},
            "status": {"enum": ["completed", "failed", "in_progress", "cancelled", "incomplete"]},
            "model": {"type": "string"},
            "output": {"type": "array", "items": {"type": "object"}},
            "usage": {"type": ["object", "null"], "description": "input_tokens, output_tokens, total_tokens"},
            "error": {"type": ["object", "null"], "description": "{code, message} of a turn that did not complete"},
            "previous_response_id": _NULLABLE_TEXT,
            **_FIXED_RESPONSE_FIELDS,
        },
    },
}


def openai_errors(paths: dict[str, Any]) -> dict[str, Any]:
    """Every error answer of the OpenAI routes is `OpenAIError`; none answers 422 (a 400 instead)."""
    for path, item in paths.items():
        if not path.startswith(PATHS_PREFIXES):
            continue
        for method, operation in item.items():
            if method == "parameters":
                continue
            operation["responses"].pop("422", None)
            for status, answer in operation["responses"].items():
                if int(status) >= 400:
                    answer["content"] = _OPENAI_ERROR  # a new dict: the shared builders' is left alone
            if "429" in operation["responses"]:  # capped so that the SDKs honour it
                operation["responses"]["429"]["headers"]["Retry-After"] = _RETRY_AFTER_60
    return paths
