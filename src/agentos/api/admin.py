"""The admin API: tenants and their API keys (`admin` scope; docs/api.md, docs/security.md).

A key is in the answer to its creation and nowhere else: the registry keeps only its hash.
Revocation and a tenant's `disabled` take effect on the next request.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
from aiohttp import web

from agentos.api.body import page_limit, query_text, read_body
from agentos.api.keys import TENANTS
from agentos.api.sessions import json_response
from agentos.tenancy.principal import TENANT_SCOPES, Scope, require
from agentos.tenancy.records import TENANT_ID_PATTERN, key_json, tenant_json
from agentos.tenancy.registry import MAX_EXPIRES_IN_S, TenantRegistry

routes = web.RouteTableDef()

TenantId = Annotated[str, msgspec.Meta(pattern=TENANT_ID_PATTERN)]
Name = Annotated[str, msgspec.Meta(max_length=200)]
ExpiresIn = Annotated[int, msgspec.Meta(ge=1, le=MAX_EXPIRES_IN_S)]
DEFAULT_KEY_SCOPES = sorted(TENANT_SCOPES)


class TenantCreate(msgspec.Struct, forbid_unknown_fields=True):
    """`limits`: overrides of `[tenant_limits]` for this tenant (any subset)."""

    tenant_id: TenantId
    name: Name = ""
    limits: dict[str, int] = {}


class TenantUpdate(msgspec.Struct, forbid_unknown_fields=True):
    """What is given changes; `limits` merges into the overrides (null drops one)."""

    name: Name | None = None
    limits: dict[str, int | None] | None = None
    disabled: bool | None = None


class KeyCreate(msgspec.Struct, forbid_unknown_fields=True):
    """`scopes`: absent means every scope but `admin`."""

    tenant_id: TenantId
    name: Name = ""
    scopes: Annotated[list[Scope], msgspec.Meta(min_length=1)] = msgspec.field(
        default_factory=lambda: list(DEFAULT_KEY_SCOPES)
    )
    expires_in_s: ExpiresIn | None = None


def _registry(request: web.Request) -> TenantRegistry:
    require(request, Scope.ADMIN)
    return request.app[TENANTS]


@routes.post("/v1/admin/tenants")
async def create_tenant(request: web.Request) -> web.Response:
    registry = _registry(request)
    body = await read_body(request, TenantCreate)
    tenant = await registry.create_tenant(body.tenant_id, name=body.name, limits=body.limits)
    return json_response(tenant_json(tenant, registry.defaults), status=201)


@routes.get("/v1/admin/tenants")
async def list_tenants(request: web.Request) -> web.Response:
    registry = _registry(request)
    limit = page_limit(request, 100)
    tenants = registry.tenants(after=query_text(request, "after"), limit=limit)
    cursor = tenants[-1].tenant_id if len(tenants) == limit else None
    return json_response({"data": [tenant_json(t, registry.defaults) for t in tenants], "next_cursor": cursor})


@routes.get("/v1/admin/tenants/{tenant_id}")
async def get_tenant(request: web.Request) -> web.Response:
    registry = _registry(request)
    return json_response(tenant_json(registry.tenant(request.match_info["tenant_id"]), registry.defaults))


@routes.patch("/v1/admin/tenants/{tenant_id}")
async def update_tenant(request: web.Request) -> web.Response:
    registry = _registry(request)
    tenant_id = request.match_info["tenant_id"]
    registry.tenant(tenant_id)  # 404 before reading the body
    body = await read_body(request, TenantUpdate)
    tenant = await registry.update_tenant(tenant_id, name=body.name, limits=body.limits, disabled=body.disabled)
    return json_response(tenant_json(tenant, registry.defaults))


@routes.post("/v1/admin/keys")
async def create_key(request: web.Request) -> web.Response:
    registry = _registry(request)
    body = await read_body(request, KeyCreate)
    key, record = await registry.create_key(
        body.tenant_id, name=body.name, scopes=body.scopes, expires_in_s=body.expires_in_s
    )
    return json_response(key_json(record, registry.now_ms()) | {"key": key}, status=201)


@routes.get("/v1/admin/keys")
async def list_keys(request: web.Request) -> web.Response:
    registry = _registry(request)
    limit = page_limit(request, 100)
    found = registry.keys(tenant_id=query_text(request, "tenant_id"), after=query_text(request, "after"), limit=limit)
    cursor = found[-1].key_id if len(found) == limit else None
    now = registry.now_ms()
    return json_response({"data": [key_json(k, now) for k in found], "next_cursor": cursor})


@routes.get("/v1/admin/keys/{key_id}")
async def get_key(request: web.Request) -> web.Response:
    registry = _registry(request)
    return json_response(key_json(registry.key(request.match_info["key_id"]), registry.now_ms()))


@routes.post("/v1/admin/keys/{key_id}/revoke")
async def revoke_key(request: web.Request) -> web.StreamResponse:
    registry = _registry(request)
    record = await registry.revoke_key(request.match_info["key_id"])
    return json_response(key_json(record, registry.now_ms()))


@routes.delete("/v1/admin/keys/{key_id}")
async def delete_key(request: web.Request) -> web.StreamResponse:
    """The same as `revoke`: the row stays (the access log names its key_id), unusable."""
    return await revoke_key(request)
