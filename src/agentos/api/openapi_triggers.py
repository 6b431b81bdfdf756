"""The triggers routes' part of the OpenAPI document (`agentos.api.openapi` merges it in).

The create body's schema is derived from the struct `agentos.api.triggers` decodes, so the two
cannot drift; the answers' are written by hand to match `agentos.triggers.records`. The events
route is open (`security: []`): its Standard Webhooks headers are its authentication.
"""

from __future__ import annotations

from typing import Any

import msgspec

from agentos.api.body import MAX_AFTER
from agentos.api.openapi_parts import BAD_BODY as _BAD_BODY
from agentos.api.openapi_parts import error as _error
from agentos.api.openapi_parts import json_answer as _json
from agentos.api.openapi_parts import json_body as _body
from agentos.api.schema_parts import after_param, limit_param, ref
from agentos.api.triggers import TriggerCreate
from agentos.triggers.service import MAX_WEBHOOK_ID

_REF = "#/components/schemas/{name}"

_, _BODIES = msgspec.json.schema_components([TriggerCreate], ref_template=_REF)

_TRIGGER_ID = {"name": "trigger_id", "in": "path", "required": True, "schema": {"type": "string"}}
_WEBHOOK_ID = {"name": "webhook_id", "in": "path", "required": True, "schema": {"type": "string"}}
_NOT_FOUND = {"404": _error("Unknown trigger (another tenant's too): trigger_not_found")}
_NULLABLE_MS = {"type": ["integer", "null"]}


def _header(name: str, description: str) -> dict[str, Any]:
    return {"name": name, "in": "header", "required": True, "schema": {"type": "string"}, "description": description}


_TRIGGER_PROPERTIES: dict[str, Any] = {
    "trigger_id": {"type": "string"},
    "agent": {"type": "string", "description": "the agent each delivery starts a run of"},
    "input_template": {"type": "string"},
    "description": {"type": "string"},
    "enabled": {"type": "boolean"},
    "created_ms": {"type": "integer"},
    "events_url": {"type": "string", "description": "where the sender posts its signed deliveries"},
    "secrets": {
        "type": "array",
        "description": "the signing secrets still valid, newest first (never the secrets themselves)",
        "items": {
            "type": "object",
            "required": ["created_ms", "expires_ms"],
            "properties": {
                "created_ms": {"type": "integer"},
                "expires_ms": {**_NULLABLE_MS, "description": "null: current; else rotated out, valid until then"},
            },
        },
    },
}

_DELIVERY_PROPERTIES: dict[str, Any] = {
    "webhook_id": {"type": "string"},
    "run_id": {"type": "string", "description": "the run it starts (chosen when it was accepted)"},
    "status": {"enum": ["queued", "started", "failed"]},
    "received_ms": {"type": "integer"},
    "attempts": {"type": "integer", "description": "starts tried (a refused start is tried again later)"},
    "reason": {"type": ["string", "null"], "description": "why it failed: agent_not_found, trigger_deleted, ..."},
}


def _page(item: str) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["data", "next_cursor"],
        "properties": {"data": {"type": "array", "items": ref(item)}, "next_cursor": {"type": ["string", "null"]}},
    }


TRIGGER_SCHEMAS: dict[str, Any] = {
    **_BODIES,
    "Trigger": {"type": "object", "required": list(_TRIGGER_PROPERTIES), "properties": _TRIGGER_PROPERTIES},
    "TriggerCreated": {
        "type": "object",
        "required": [*_TRIGGER_PROPERTIES, "secret"],
        "properties": {
            **_TRIGGER_PROPERTIES,
            "secret": {
                "type": "string",
                "pattern": "^whsec_[A-Za-z0-9+/]+={0,2}$",
                "description": "the signing secret (Standard Webhooks): shown here once, never stored",
            },
        },
    },
    "TriggerPage": _page("Trigger"),
    "Delivery": {"type": "object", "required": list(_DELIVERY_PROPERTIES), "properties": _DELIVERY_PROPERTIES},
    "DeliveryPage": _page("Delivery"),
    "DeliveryAccepted": {
        "type": "object",
        "required": ["webhook_id", "run_id", "status", "duplicate"],
        "properties": {
            "webhook_id": {"type": "string"},
            "run_id": {"type": "string", "description": "the run it starts: GET /v1/runs/{run_id} once started"},
            "status": {"enum": ["queued", "started", "failed"]},
            "duplicate": {"type": "boolean", "description": "true: a redelivery; nothing new was stored or started"},
        },
    },
    "WebhookPayload": {"description": "Any JSON: the event as the sender sends it (signed as raw bytes)"},
}

_EVENTS = {
    "summary": "Deliver a signed event (Standard Webhooks); no API key: the signature authenticates it",
    "security": [],
    "parameters": [
        _header("webhook-id", f"the event's id, unchanged across retries: 1 to {MAX_WEBHOOK_ID} printable ASCII"),
        _header("webhook-timestamp", "Unix seconds of this attempt; within triggers.tolerance_s of the server"),
        _header("webhook-signature", "space-separated `v1,<base64 HMAC-SHA256 of id.timestamp.body>` entries"),
    ],
    "requestBody": {"required": True, "content": {"application/json": {"schema": ref("WebhookPayload")}}},
    "responses": {
        "202": _json("Committed: its run starts shortly, with this run id", "DeliveryAccepted"),
        "200": _json("A redelivery of a webhook-id already accepted: the same run id, nothing new", "DeliveryAccepted"),
        "400": _error("The body is not JSON (malformed_json), or a bad webhook-id (invalid_webhook_id)"),
        "401": _error("missing_signature, invalid_signature or timestamp_out_of_tolerance (never echoes them)"),
        "404": _error("Unknown, deleted or disabled trigger: trigger_not_found"),
        "413": _error("Body over triggers.max_body_bytes"),
    },
}

TRIGGER_PATHS: dict[str, Any] = {
    "/v1/triggers": {
        "post": {
            "summary": "Create a trigger of an agent; the answer is the only place its secret appears",
            "requestBody": _body("TriggerCreate"),
            "responses": {
                "201": _json("The trigger, with its secret", "TriggerCreated"),
                **_BAD_BODY,
                "404": _error("Not an agent this tenant can run: agent_not_found"),
                "409": _error("The tenant has triggers.max_triggers triggers: too_many_triggers"),
            },
        },
        "get": {
            "summary": "List the tenant's triggers, by id",
            "parameters": [limit_param(100), after_param("string")],
            "responses": {"200": _json("A page of triggers", "TriggerPage"), "422": _error("A bad limit")},
        },
    },
    "/v1/triggers/{trigger_id}": {
        "parameters": [_TRIGGER_ID],
        "get": {
            "summary": "Read a trigger (never its secret)",
            "responses": {"200": _json("The trigger", "Trigger"), **_NOT_FOUND},
        },
        "delete": {
            "summary": "Delete a trigger; its deliveries not started yet fail (trigger_deleted)",
            "responses": {"204": {"description": "Deleted"}, **_NOT_FOUND},
        },
    },
    "/v1/triggers/{trigger_id}/rotate": {
        "parameters": [_TRIGGER_ID],
        "post": {
            "summary": "A new secret (shown once); the old one stays valid for triggers.rotation_overlap_s",
            "responses": {"200": _json("The trigger, with its new secret", "TriggerCreated"), **_NOT_FOUND},
        },
    },
    "/v1/triggers/{trigger_id}/deliveries": {
        "parameters": [_TRIGGER_ID],
        "get": {
            "summary": "The trigger's deliveries, newest first (kept for triggers.dedup_horizon_s)",
            "parameters": [
                limit_param(100),
                {
                    "name": "before",
                    "in": "query",
                    "schema": {"type": "integer", "minimum": 0, "maximum": MAX_AFTER},
                    "description": "the next_cursor of the page before (a received_ms)",
                },
            ],
            "responses": {
                "200": _json("A page of deliveries", "DeliveryPage"),
                **_NOT_FOUND,
                "422": _error("A bad limit or before"),
            },
        },
    },
    "/v1/triggers/{trigger_id}/deliveries/{webhook_id}": {
        "parameters": [_TRIGGER_ID, _WEBHOOK_ID],
        "get": {
            "summary": "One delivery, by its webhook-id",
            "responses": {
                "200": _json("The delivery", "Delivery"),
                "404": _error("Unknown trigger or delivery: trigger_not_found, delivery_not_found"),
            },
        },
    },
    "/v1/triggers/{trigger_id}/events": {"parameters": [_TRIGGER_ID], "post": _EVENTS},
}
