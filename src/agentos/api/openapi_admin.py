"""The admin routes' part of the OpenAPI document (`agentos.api.openapi` merges it in).

The request bodies' schemas are derived from the structs `agentos.api.admin` decodes, so they
cannot drift; the answers' are written by hand to match `agentos.tenancy.records`.
"""

from __future__ import annotations

from typing import Any

import msgspec

from agentos.api.admin import KeyCreate, TenantCreate, TenantUpdate
from agentos.api.openapi_parts import BAD_BODY as _BAD_BODY
from agentos.api.openapi_parts import error as _error
from agentos.api.openapi_parts import json_answer as _json
from agentos.api.openapi_parts import json_body as _body
from agentos.api.schema_parts import after_param, limit_param, ref
from agentos.config.tenants import TenantLimits

_REF = "#/components/schemas/{name}"


_BAD_QUERY = {"422": _error("A bad limit; the message names the parameter")}
_TENANT_ID = {"name": "tenant_id", "in": "path", "required": True, "schema": {"type": "string"}}
_KEY_ID = {"name": "key_id", "in": "path", "required": True, "schema": {"type": "string"}}
_NULLABLE_MS = {"type": ["integer", "null"]}

_, _BODIES = msgspec.json.schema_components([TenantCreate, TenantUpdate, KeyCreate], ref_template=_REF)
_, _LIMITS = msgspec.json.schema_components([TenantLimits], ref_template=_REF)
# `limits` is a dict in the structs; the server takes only TenantLimits' names, each in its range
# (`agentos.tenancy.records`): say so, or a valid-looking override is a 422.
_RANGES = {
    name: {k: v for k, v in field.items() if k != "default"}
    for name, field in _LIMITS["TenantLimits"]["properties"].items()
}
_BODIES["TenantCreate"]["properties"]["limits"] = {
    "type": "object",
    "properties": _RANGES,
    "additionalProperties": False,
    "default": {},
}
_BODIES["TenantUpdate"]["properties"]["limits"] = {
    "anyOf": [
        {
            "type": "object",
            "properties": {name: {"anyOf": [field, {"type": "null"}]} for name, field in _RANGES.items()},
            "additionalProperties": False,
        },
        {"type": "null"},
    ],
    "default": None,
}

_KEY_PROPERTIES: dict[str, Any] = {
    "key_id": {"type": "string", "description": "public: in lists and the access log"},
    "tenant_id": {"type": "string"},
    "name": {"type": "string"},
    "scopes": {"type": "array", "items": ref("Scope")},
    "status": {"enum": ["active", "expired", "revoked"]},
    "created_ms": {"type": "integer"},
    "expires_ms": {**_NULLABLE_MS, "description": "null: never expires"},
    "revoked_ms": _NULLABLE_MS,
}

ADMIN_SCHEMAS: dict[str, Any] = {
    **_BODIES,
    **_LIMITS,
    "Tenant": {
        "type": "object",
        "required": ["tenant_id", "name", "disabled", "limit_overrides", "limits", "created_ms"],
        "properties": {
            "tenant_id": {"type": "string"},
            "name": {"type": "string"},
            "disabled": {"type": "boolean", "description": "its keys are refused (401) while true"},
            "limit_overrides": {"type": "object", "additionalProperties": {"type": "integer"}},
            "limits": {**ref("TenantLimits"), "description": "effective: [tenant_limits] with the overrides"},
            "created_ms": {"type": "integer"},
        },
    },
    "TenantPage": {
        "type": "object",
        "required": ["data", "next_cursor"],
        "properties": {"data": {"type": "array", "items": ref("Tenant")}, "next_cursor": {"type": ["string", "null"]}},
    },
    "ApiKey": {"type": "object", "required": list(_KEY_PROPERTIES), "properties": _KEY_PROPERTIES},
    "ApiKeyCreated": {
        "type": "object",
        "required": [*_KEY_PROPERTIES, "key"],
        "properties": {
            **_KEY_PROPERTIES,
            "key": {
                "type": "string",
                "pattern": "^aos_[0-9A-Za-z]{12}_[0-9A-Za-z]{36}$",
                "description": "the bearer key: shown here once, stored only as a keyed hash",
            },
        },
    },
    "ApiKeyPage": {
        "type": "object",
        "required": ["data", "next_cursor"],
        "properties": {"data": {"type": "array", "items": ref("ApiKey")}, "next_cursor": {"type": ["string", "null"]}},
    },
}


def _key_answer() -> dict[str, Any]:
    return {"200": _json("The key (never the key itself)", "ApiKey"), "404": _error("Unknown key")}


ADMIN_PATHS: dict[str, Any] = {
    "/v1/admin/tenants": {
        "post": {
            "summary": "Create a tenant",
            "requestBody": _body("TenantCreate"),
            "responses": {"201": _json("The tenant", "Tenant"), **_BAD_BODY, "409": _error("The id is taken")},
        },
        "get": {
            "summary": "List tenants, by id",
            "parameters": [limit_param(100), after_param("string")],
            "responses": {"200": _json("A page of tenants", "TenantPage"), **_BAD_QUERY},
        },
    },
    "/v1/admin/tenants/{tenant_id}": {
        "parameters": [_TENANT_ID],
        "get": {
            "summary": "Read a tenant",
            "responses": {"200": _json("The tenant", "Tenant"), "404": _error("Unknown tenant")},
        },
        "patch": {
            "summary": "Change a tenant's name, limits or disabled flag (effective on the next request)",
            "requestBody": _body("TenantUpdate"),
            "responses": {"200": _json("The tenant", "Tenant"), **_BAD_BODY, "404": _error("Unknown tenant")},
        },
    },
    "/v1/admin/keys": {
        "post": {
            "summary": "Create an API key; the answer is the only place the key appears",
            "requestBody": _body("KeyCreate"),
            "responses": {
                "201": _json("The key, with the key itself", "ApiKeyCreated"),
                **_BAD_BODY,
                "404": _error("Unknown tenant"),
            },
        },
        "get": {
            "summary": "List keys, by key_id",
            "parameters": [
                limit_param(100),
                after_param("string"),
                {"name": "tenant_id", "in": "query", "schema": {"type": "string"}, "description": "only this tenant's"},
            ],
            "responses": {"200": _json("A page of keys", "ApiKeyPage"), **_BAD_QUERY},
        },
    },
    "/v1/admin/keys/{key_id}": {
        "parameters": [_KEY_ID],
        "get": {"summary": "Read a key", "responses": _key_answer()},
        "delete": {"summary": "Revoke a key (the same as POST .../revoke)", "responses": _key_answer()},
    },
    "/v1/admin/keys/{key_id}/revoke": {
        "parameters": [_KEY_ID],
        "post": {"summary": "Revoke a key, effective on the next request", "responses": _key_answer()},
    },
}
