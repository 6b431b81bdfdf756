"""Trigger routes: triggers (keyed) and their signed deliveries (not keyed). docs/triggers.md

Routes::

    POST   /v1/triggers                      {"agent", "input_template"?, "description"?}  201 trigger + secret
    GET    /v1/triggers                                                 200 {"data", "next_cursor"}
    GET    /v1/triggers/{trigger_id}                                    200 trigger (never the secret)
    DELETE /v1/triggers/{trigger_id}                                    204
    POST   /v1/triggers/{trigger_id}/rotate                             200 trigger + new secret
    GET    /v1/triggers/{trigger_id}/deliveries   ?limit&before         200 {"data", "next_cursor"}
    GET    /v1/triggers/{trigger_id}/deliveries/{webhook_id}            200 delivery
    POST   /v1/triggers/{trigger_id}/events  Standard Webhooks headers  202 new | 200 redelivery

Reads take `triggers:read`, the rest `triggers:write`, and act for the key's tenant. The events
route takes no key (`agentos.api.middleware.OPEN_ROUTES`): the sender signs each delivery with
the trigger's secret. Its order of checks: unknown trigger 404; Content-Length or the body over
`triggers.max_body_bytes` 413 (the body is read by us, capped, gzip inflated before it is
verified); signature and timestamp 401; not JSON (or nested too deep), or a bad webhook-id,
400; a string with NUL 422; then it is committed and answered.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
from aiohttp import web

from agentos.api.body import MAX_AFTER, page_limit, query_int, query_text, read_body
from agentos.api.body_encoding import read_raw
from agentos.api.keys import TRIGGERS
from agentos.api.sessions import json_response
from agentos.errors import RequestError
from agentos.tenancy.principal import Scope, require
from agentos.triggers.template import MAX_TEMPLATE_CHARS

routes = web.RouteTableDef()


class TriggerCreate(msgspec.Struct, forbid_unknown_fields=True):
    """`input_template`: the run's input; `{payload}` is the body, `{payload.a.b}` a field of it
    (docs/triggers.md)."""

    agent: Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
    input_template: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_TEMPLATE_CHARS)] = "{payload}"
    description: Annotated[str, msgspec.Meta(max_length=1000)] = ""


@routes.post("/v1/triggers")
async def create_trigger(request: web.Request) -> web.Response:
    tenant_id = require(request, Scope.TRIGGERS_WRITE).tenant_id
    body = await read_body(request, TriggerCreate)
    created = await request.app[TRIGGERS].create(tenant_id, body.agent, body.input_template, body.description)
    return json_response(created, status=201)


@routes.get("/v1/triggers")
async def list_triggers(request: web.Request) -> web.Response:
    """By id; `?after=` the `next_cursor` of the page before."""
    tenant_id = require(request, Scope.TRIGGERS_READ).tenant_id
    limit = page_limit(request, 100)
    after = query_text(request, "after")
    found = sorted(await request.app[TRIGGERS].list_triggers(tenant_id), key=lambda t: str(t["trigger_id"]))
    later = [t for t in found if after is None or t["trigger_id"] > after]
    page = later[:limit]
    cursor = page[-1]["trigger_id"] if len(later) > limit else None
    return json_response({"data": page, "next_cursor": cursor})


@routes.get("/v1/triggers/{trigger_id}")
async def get_trigger(request: web.Request) -> web.Response:
    tenant_id = require(request, Scope.TRIGGERS_READ).tenant_id
    return json_response(await request.app[TRIGGERS].get(tenant_id, request.match_info["trigger_id"]))


@routes.delete("/v1/triggers/{trigger_id}")
async def delete_trigger(request: web.Request) -> web.Response:
    tenant_id = require(request, Scope.TRIGGERS_WRITE).tenant_id
    await request.app[TRIGGERS].delete(tenant_id, request.match_info["trigger_id"])
    return web.Response(status=204)


@routes.post("/v1/triggers/{trigger_id}/rotate")
async def rotate_secret(request: web.Request) -> web.Response:
    tenant_id = require(request, Scope.TRIGGERS_WRITE).tenant_id
    return json_response(await request.app[TRIGGERS].rotate(tenant_id, request.match_info["trigger_id"]))


@routes.get("/v1/triggers/{trigger_id}/deliveries")
async def list_deliveries(request: web.Request) -> web.Response:
    """Newest first; `?before=` the `next_cursor` of the page before (a received_ms)."""
    tenant_id = require(request, Scope.TRIGGERS_READ).tenant_id
    limit = page_limit(request, 100)
    before = query_int(request, "before", 0, low=0, high=MAX_AFTER) if "before" in request.query else None
    service = request.app[TRIGGERS]
    page = await service.deliveries(tenant_id, request.match_info["trigger_id"], limit=limit, before_ms=before)
    cursor = str(page[-1]["received_ms"]) if len(page) == limit else None
    return json_response({"data": page, "next_cursor": cursor})


@routes.get("/v1/triggers/{trigger_id}/deliveries/{webhook_id}")
async def get_delivery(request: web.Request) -> web.Response:
    tenant_id = require(request, Scope.TRIGGERS_READ).tenant_id
    trigger_id, webhook_id = request.match_info["trigger_id"], request.match_info["webhook_id"]
    return json_response(await request.app[TRIGGERS].delivery(tenant_id, trigger_id, webhook_id))


@routes.post("/v1/triggers/{trigger_id}/events")
async def deliver(request: web.Request) -> web.Response:
    """A signed delivery (no key). 202 when it is new, 200 for a redelivery: both only once the
    delivery is committed, both with the same run id."""
    service = request.app[TRIGGERS]
    try:
        trigger = await service.find(request.match_info["trigger_id"])
        body = await read_raw(request, service.config.max_body_bytes, "a delivery's body")
        answer, created = await service.deliver(trigger, request.headers, body)
    except RequestError:
        service.rejected()
        raise
    return json_response(answer, status=202 if created else 200)
