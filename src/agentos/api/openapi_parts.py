"""Small builders the OpenAPI document's operations share (`agentos.api.openapi`, `.openapi_admin`)."""

from __future__ import annotations

from typing import Any

from agentos.api.schema_parts import ref


def error(description: str) -> dict[str, Any]:
    """An answer whose body is the `Error` schema."""
    return {"description": description, "content": {"application/json": {"schema": ref("Error")}}}


def json_answer(description: str, schema: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": ref(schema)}}}


def json_body(schema: str) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": ref(schema)}}}


_ERROR_CONTENT = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
_WWW = {"WWW-Authenticate": {"schema": {"type": "string"}, "description": 'Bearer realm="agentos"[, error=...]'}}

BEARER = {
    "type": "http",
    "scheme": "bearer",
    "bearerFormat": "aos_<key_id>_<secret><checksum>",
    "description": "An API key (POST /v1/admin/keys) or the server's api_token; never in the URL. docs/security.md",
}

BAD_BODY = {
    "400": error(
        "Malformed JSON, or nested deeper than 64 levels (malformed_json);"
        " not what its Content-Encoding says (malformed_body)"
    ),
    "413": error("Body over the limit, as sent or once inflated"),
    "415": error("A Content-Encoding other than gzip, deflate or identity (unsupported_content_encoding)"),
    "422": error("Wrong types or values, or a string with NUL; the message names the field"),
}


def secured(paths: dict[str, Any]) -> dict[str, Any]:
    """Every operation but the open ones (`security: []`) names the bearer scheme and documents
    its 401 (no usable key) and 403 (the key lacks the scope the operation needs)."""
    unauthorized = {"description": "Missing, malformed, unknown, expired or revoked bearer key", "headers": _WWW}
    forbidden = {"description": "The key lacks the scope this operation needs (insufficient_scope)"}
    for item in paths.values():
        for method, operation in item.items():
            if method != "parameters" and operation.get("security") != []:
                operation["security"] = [{"bearer": []}]
                operation["responses"].setdefault("401", unauthorized | {"content": _ERROR_CONTENT})
                operation["responses"].setdefault("403", forbidden | {"content": _ERROR_CONTENT})
    return paths


_UNAVAILABLE = (
    "`store_unavailable`: the database cannot be reached (refused, dropped, or slower than its"
    " bound); nothing was acknowledged, retry after Retry-After"
)
_RETRY_AFTER = {"description": "Seconds to wait before trying again", "schema": {"type": "integer", "minimum": 1}}


def store_backed(paths: dict[str, Any]) -> dict[str, Any]:
    """Every `/v1/` operation reads or writes a store, so each documents the 503 of a store
    that cannot be reached (next to the draining 503 where there is one)."""
    for path, item in paths.items():
        if not path.startswith("/v1/"):
            continue
        for method, operation in item.items():
            if method == "parameters":
                continue
            old = operation["responses"].get("503")
            description = f"{old['description']}; or {_UNAVAILABLE}" if old else _UNAVAILABLE
            answer = {"description": description, "content": _ERROR_CONTENT, "headers": {"Retry-After": _RETRY_AFTER}}
            operation["responses"]["503"] = answer
    return paths


def json_bodied(paths: dict[str, Any]) -> dict[str, Any]:
    """Every keyed operation whose body is JSON only documents the 415 of a body sent as another
    type (`agentos.api.body.read_body`); the signed deliveries (no key) read any body."""
    for item in paths.values():
        for method, operation in item.items():
            content = operation.get("requestBody", {}).get("content", {}) if method != "parameters" else {}
            if set(content) == {"application/json"} and operation.get("security") != []:
                message = "`unsupported_media_type`: a body not sent as `Content-Type: application/json`"
                operation["responses"].setdefault("415", error(message))
    return paths
