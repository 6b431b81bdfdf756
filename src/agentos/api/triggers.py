"""Trigger routes: triggers (keyed) and their signed deliveries (not keyed). docs/triggers.md

Routes::

    POST   /v1/triggers                      {"agent", "input_template"?, "description"?}  201 trigger + secret
    GET    /v1/triggers                                                 200 {"data", "next_cursor"}
    GET    /v1/triggers/{trigger_id}                                    200 trigger (never the secret)
    DELETE /v1/triggers/{trigger_id}                                    204
    POST   /v1/triggers/{trigger_id}/rotate                             200 trigger + new secret
    GET    /v1/triggers/{trigger_id}/deliveries   ?limit&before&status  200 {"data", "next_cursor"}
    GET    /v1/triggers/{trigger_id}/deliveries/{webhook_id}            200 delivery
    POST   /v1/triggers/{trigger_id}/deliveries/{webhook_id}/retry      202 delivery (a failed one, queued again)
    POST   /v1/triggers/{trigger_id}/events  Standard Webhooks headers  202 new | 200 redelivery

Reads take `triggers:read`, the rest `triggers:write`, and act for the key's tenant. The events
route takes no key (`agentos.api.middleware.OPEN_ROUTES`): the sender signs each delivery with
the trigger's secret. Its order of checks: unknown trigger 404; Content-Length or the body over
`triggers.max_body_bytes` 413 (the body is read by us, capped, gzip inflated before it is
verified); signature and timestamp 401; not JSON (or nested too deep), or a bad webhook-id,
400; a string with NUL 422; then it is committed and answered.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from aiohttp import web

from agentos.agents.traces import RunTraces
from agentos.api.body import MAX_AFTER, page_limit, query_int, query_text, read_body
from agentos.api.body_encoding import read_raw
from agentos.api.keys import RUNTIME, TRIGGERS
from agentos.api.routes import (
    BAD_BODY,
    Answer,
    Schema,
    header,
    json,
    limit_param,
    listing,
    nullable,
    obj,
    page,
    query,
    tagged,
)
from agentos.api.sessions import json_response, page_by_id, page_response
from agentos.api.tracing import w3c_context
from agentos.clock import wall_ms
from agentos.errors import InvalidInput, RequestError
from agentos.telemetry import Tracing
from agentos.tenancy.principal import Scope, require
from agentos.triggers.records import DELIVERY_STATUSES, DeliveryQuery
from agentos.triggers.service import MAX_WEBHOOK_ID
from agentos.triggers.template import MAX_TEMPLATE_CHARS

routes = web.RouteTableDef()
operation = tagged("triggers")


class TriggerCreate(msgspec.Struct, forbid_unknown_fields=True):
    """`input_template`: the run's input; `{payload}` is the body, `{payload.a.b}` a field of it
    (docs/triggers.md)."""

    agent: Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
    input_template: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_TEMPLATE_CHARS)] = "{payload}"
    description: Annotated[str, msgspec.Meta(max_length=1000)] = ""


# The answers, as `agentos.triggers.records` writes them.
_NULLABLE_MS = nullable("integer")
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
        "items": obj(
            {
                "created_ms": {"type": "integer"},
                "expires_ms": {**_NULLABLE_MS, "description": "null: current; else rotated out, valid until then"},
            }
        ),
    },
}
_TRIGGER = Schema.object("Trigger", _TRIGGER_PROPERTIES)
_SECRET = {
    "type": "string",
    "pattern": "^whsec_[A-Za-z0-9+/]+={0,2}$",
    "description": "the signing secret (Standard Webhooks): shown here once, never stored",
}
_CREATED = Schema.object("TriggerCreated", {**_TRIGGER_PROPERTIES, "secret": _SECRET})
_DELIVERY_PROPERTIES: dict[str, Any] = {
    "webhook_id": {"type": "string"},
    "run_id": {"type": "string", "description": "the run it starts (chosen when it was accepted)"},
    "status": {"enum": list(DELIVERY_STATUSES)},
    "received_ms": {"type": "integer"},
    "attempts": {"type": "integer", "description": "starts tried (a refused start is tried again later)"},
    "reason": {**nullable("string"), "description": "why it failed: agent_not_found, trigger_deleted, ..."},
}
_DELIVERY = Schema.object("Delivery", _DELIVERY_PROPERTIES)
_ACCEPTED = Schema.object(
    "DeliveryAccepted",
    {
        "webhook_id": {"type": "string"},
        "run_id": {"type": "string", "description": "the run it starts: GET /v1/runs/{run_id} once started"},
        "status": {"enum": list(DELIVERY_STATUSES)},
        "duplicate": {"type": "boolean", "description": "true: a redelivery; nothing new was stored or started"},
    },
)
_PAYLOAD = Schema("WebhookPayload", {"description": "Any JSON: the event as the sender sends it (signed as raw bytes)"})
_NOT_FOUND = {404: "Unknown trigger (another tenant's too): trigger_not_found"}


@routes.post("/v1/triggers")
@operation(
    "Create a trigger of an agent; the answer is the only place its secret appears",
    body=TriggerCreate,
    answers={201: json("The trigger, with its secret", _CREATED)},
    errors=BAD_BODY
    | {
        404: "Not an agent this tenant can run: agent_not_found",
        409: "The tenant has triggers.max_triggers triggers: too_many_triggers",
    },
)
async def create_trigger(request: web.Request) -> web.Response:
    tenant_id = require(request, Scope.TRIGGERS_WRITE).tenant_id
    body = await read_body(request, TriggerCreate)
    created = await request.app[TRIGGERS].create(tenant_id, body.agent, body.input_template, body.description)
    return json_response(created, status=201)


@routes.get("/v1/triggers")
@operation(
    "List the tenant's triggers, by id",
    **listing("A page of triggers", "TriggerPage", _TRIGGER, 100),
    errors={422: "A bad limit"},
)
async def list_triggers(request: web.Request) -> web.Response:
    """By id; `?after=` the `next_cursor` of the page before."""
    tenant_id = require(request, Scope.TRIGGERS_READ).tenant_id
    return page_by_id(request, await request.app[TRIGGERS].list_triggers(tenant_id), "trigger_id", 100)


@routes.get("/v1/triggers/{trigger_id}")
@operation("Read a trigger (never its secret)", answers={200: json("The trigger", _TRIGGER)}, errors=_NOT_FOUND)
async def get_trigger(request: web.Request) -> web.Response:
    tenant_id = require(request, Scope.TRIGGERS_READ).tenant_id
    return json_response(await request.app[TRIGGERS].get(tenant_id, request.match_info["trigger_id"]))


@routes.delete("/v1/triggers/{trigger_id}")
@operation(
    "Delete a trigger; its deliveries not started yet fail (trigger_deleted)",
    answers={204: Answer(description="Deleted")},
    errors=_NOT_FOUND,
)
async def delete_trigger(request: web.Request) -> web.Response:
    tenant_id = require(request, Scope.TRIGGERS_WRITE).tenant_id
    await request.app[TRIGGERS].delete(tenant_id, request.match_info["trigger_id"])
    return web.Response(status=204)


@routes.post("/v1/triggers/{trigger_id}/rotate")
@operation(
    "A new secret (shown once); the old one stays valid for triggers.rotation_overlap_s",
    answers={200: json("The trigger, with its new secret", _CREATED)},
    errors=_NOT_FOUND,
)
async def rotate_secret(request: web.Request) -> web.Response:
    tenant_id = require(request, Scope.TRIGGERS_WRITE).tenant_id
    return json_response(await request.app[TRIGGERS].rotate(tenant_id, request.match_info["trigger_id"]))


@routes.get("/v1/triggers/{trigger_id}/deliveries")
@operation(
    "The trigger's deliveries, newest first (kept for triggers.dedup_horizon_s)",
    parameters=(
        limit_param(100),
        query(
            "before",
            "the next_cursor of the page before (a received_ms)",
            {"type": "integer", "minimum": 0, "maximum": MAX_AFTER},
        ),
        query("status", "only deliveries in this status (failed: those to retry)", {"enum": list(DELIVERY_STATUSES)}),
    ),
    answers={200: json("A page of deliveries", page("DeliveryPage", _DELIVERY))},
    errors=_NOT_FOUND | {422: "A bad limit, before or status"},
)
async def list_deliveries(request: web.Request) -> web.Response:
    """Newest first; `?before=` the `next_cursor` of the page before (a received_ms); `?status=`."""
    tenant_id = require(request, Scope.TRIGGERS_READ).tenant_id
    limit = page_limit(request, 100)
    before = query_int(request, "before", 0, low=0, high=MAX_AFTER) if "before" in request.query else None
    status = query_text(request, "status")
    if status is not None and status not in DELIVERY_STATUSES:
        raise InvalidInput(
            f"query parameter 'status' must be one of {', '.join(DELIVERY_STATUSES)}, got {status[:40]!r}"
        )
    service = request.app[TRIGGERS]
    query = DeliveryQuery(limit, before, status)
    page = await service.deliveries(tenant_id, request.match_info["trigger_id"], query)
    return page_response(page, limit, lambda d: d, lambda d: str(d["received_ms"]))


@routes.get("/v1/triggers/{trigger_id}/deliveries/{webhook_id}")
@operation(
    "One delivery, by its webhook-id",
    answers={200: json("The delivery", _DELIVERY)},
    errors={404: "Unknown trigger or delivery: trigger_not_found, delivery_not_found"},
)
async def get_delivery(request: web.Request) -> web.Response:
    tenant_id = require(request, Scope.TRIGGERS_READ).tenant_id
    trigger_id, webhook_id = request.match_info["trigger_id"], request.match_info["webhook_id"]
    return json_response(await request.app[TRIGGERS].delivery(tenant_id, trigger_id, webhook_id))


@routes.post("/v1/triggers/{trigger_id}/deliveries/{webhook_id}/retry")
@operation(
    "Queue a failed delivery again, once what failed it is fixed; its run keeps the id it was answered with",
    answers={202: json("The delivery, queued: its run starts shortly", _DELIVERY)},
    errors={
        404: "Unknown trigger or delivery: trigger_not_found, delivery_not_found",
        409: "`delivery_not_failed`: it is queued or started",
    },
)
async def retry_delivery(request: web.Request) -> web.Response:
    tenant_id = require(request, Scope.TRIGGERS_WRITE).tenant_id
    trigger_id, webhook_id = request.match_info["trigger_id"], request.match_info["webhook_id"]
    return json_response(await request.app[TRIGGERS].retry(tenant_id, trigger_id, webhook_id), status=202)


@routes.post("/v1/triggers/{trigger_id}/events")
@operation(
    "Deliver a signed event (Standard Webhooks); no API key: the signature authenticates it",
    open=True,
    parameters=(
        header(
            "webhook-id",
            f"the event's id, unchanged across retries: 1 to {MAX_WEBHOOK_ID} printable ASCII",
            required=True,
        ),
        header(
            "webhook-timestamp",
            "Unix seconds of this attempt; within triggers.tolerance_s of the server",
            required=True,
        ),
        header(
            "webhook-signature",
            "space-separated `v1,<base64 HMAC-SHA256 of id.timestamp.body>` entries",
            required=True,
        ),
    ),
    body=_PAYLOAD,
    answers={
        202: json("Committed: its run starts shortly, with this run id", _ACCEPTED),
        200: json("A redelivery of a webhook-id already accepted: the same run id, nothing new", _ACCEPTED),
    },
    errors={
        400: "The body is not JSON (malformed_json), or a bad webhook-id (invalid_webhook_id)",
        401: "missing_signature, invalid_signature or timestamp_out_of_tolerance (never echoes them)",
        404: "Unknown, deleted or disabled trigger: trigger_not_found",
        413: "Body over triggers.max_body_bytes",
    },
)
async def deliver(request: web.Request) -> web.Response:
    """A signed delivery (no key). 202 when it is new, 200 for a redelivery: both only once the
    delivery is committed, both with the same run id."""
    service = request.app[TRIGGERS]
    started_ms = wall_ms()
    try:
        trigger = await service.find(request.match_info["trigger_id"])
        body = await read_raw(request, service.config.max_body_bytes, "a delivery's body")
        answer, created = await service.deliver(trigger, request.headers, body)
    except RequestError:
        service.rejected()
        raise
    tracing = request.app[RUNTIME].tracing
    if tracing.on:
        _trace_delivery(tracing, request, trigger.trigger_id, str(answer["run_id"]), created, started_ms)
    return json_response(answer, status=202 if created else 200)


def _trace_delivery(
    tracing: Tracing, request: web.Request, trigger_id: str, run_id: str, created: bool, started_ms: int
) -> None:
    """The delivery in the sender's trace: its `traceparent` is taken only now, the signature
    checked (a forged request writes nothing into anyone's trace), with links to this request's
    span and to the run it starts (a trace of its own, `agentos.agents.traces`)."""
    sender, state = w3c_context(request)
    attributes = {
        "agentos.trigger.id": trigger_id,
        "agentos.run.id": run_id,
        "agentos.delivery.new": created,
        "agentos.webhook.id": request.headers.get("webhook-id", "")[:200],
    }
    links = [RunTraces(tracing).root(run_id), tracing.current_traceparent()]
    tracing.record(
        "agentos.trigger.delivery",
        attributes,
        start_ms=started_ms,
        end_ms=wall_ms(),
        parent=sender,
        tracestate=state,
        links=[link for link in links if link],
    )
