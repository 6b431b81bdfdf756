"""The admin API: tenants, their API keys and their identity providers (`admin` scope;
docs/api.md, docs/security.md).

A key is in the answer to its creation and nowhere else: the registry keeps only its hash.
Revocation and a tenant's `disabled` take effect on the next request.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from aiohttp import web

from agentos.api.body import page_limit, query_text, read_body
from agentos.api.keys import SETTINGS, TENANTS, USERS
from agentos.api.routes import BAD_BODY, Answer, Schema, json, listing, query, refines, tagged
from agentos.api.sessions import json_response, page_response
from agentos.config.tenants import Budget, TenantLimits
from agentos.errors import BadRequest
from agentos.identity.issuers import MAX_ISSUERS_PER_TENANT, IssuerSetting, IssuerTaken, checked_issuers
from agentos.tenancy.principal import TENANT_SCOPES, Scope, require
from agentos.tenancy.records import TENANT_ID_PATTERN, key_json, tenant_json
from agentos.tenancy.registry import MAX_EXPIRES_IN_S, TenantRegistry

routes = web.RouteTableDef()
operation = tagged("admin")

TenantId = Annotated[str, msgspec.Meta(pattern=TENANT_ID_PATTERN)]
Name = Annotated[str, msgspec.Meta(max_length=200)]
ExpiresIn = Annotated[int, msgspec.Meta(ge=1, le=MAX_EXPIRES_IN_S)]
DEFAULT_KEY_SCOPES = sorted(TENANT_SCOPES)


class TenantCreate(msgspec.Struct, forbid_unknown_fields=True):
    """`limits`: overrides of `[tenant_limits]` for this tenant (any subset)."""

    tenant_id: TenantId
    name: Name = ""
    limits: dict[str, int | float] = {}


class TenantUpdate(msgspec.Struct, forbid_unknown_fields=True):
    """What is given changes; `limits` merges into the overrides (null drops one)."""

    name: Name | None = None
    limits: dict[str, int | float | None] | None = None
    disabled: bool | None = None


class KeyCreate(msgspec.Struct, forbid_unknown_fields=True):
    """`scopes`: absent means every scope but `admin`."""

    tenant_id: TenantId
    name: Name = ""
    scopes: Annotated[list[Scope], msgspec.Meta(min_length=1)] = msgspec.field(
        default_factory=lambda: list(DEFAULT_KEY_SCOPES)
    )
    expires_in_s: ExpiresIn | None = None
    budget_per_day: Budget = 0.0  # the key's own spending budgets (0: none; the tenant's still apply)
    budget_per_month: Budget = 0.0


class KeyUpdate(msgspec.Struct, forbid_unknown_fields=True):
    """What is given changes: the key's spending budgets (0: none)."""

    budget_per_day: Budget | None = None
    budget_per_month: Budget | None = None


class IssuersPut(msgspec.Struct, forbid_unknown_fields=True):
    """The tenant's identity providers, the whole list (an empty one: none)."""

    issuers: Annotated[list[IssuerSetting], msgspec.Meta(max_length=MAX_ISSUERS_PER_TENANT)]


class TenantIssuers(msgspec.Struct):
    """A tenant's identity providers: `issuers`, set over this API (a PUT replaces them), and
    `from_config`, the config file's `[[identity.issuers]]` for the tenant (read-only here)."""

    tenant_id: str
    issuers: list[IssuerSetting]
    from_config: list[IssuerSetting] = msgspec.field(default_factory=list)


def _ranges() -> dict[str, Any]:
    """Each limit's schema, without its default (an override has none)."""
    fields = msgspec.json.schema_components([TenantLimits])[1]["TenantLimits"]["properties"].items()
    return {name: {k: v for k, v in field.items() if k != "default"} for name, field in fields}


# `limits` is a dict in the structs; the server takes only TenantLimits' names, each in its range
# (`agentos.tenancy.records`): say so, or a valid-looking override is a 422.
@refines("TenantCreate")
def _create_limits(schemas: dict[str, Any]) -> None:
    limits = {"type": "object", "properties": _ranges(), "additionalProperties": False, "default": {}}
    schemas["TenantCreate"]["properties"]["limits"] = limits


@refines("TenantUpdate")
def _update_limits(schemas: dict[str, Any]) -> None:
    properties = {name: {"anyOf": [field, {"type": "null"}]} for name, field in _ranges().items()}
    limits = {"type": "object", "properties": properties, "additionalProperties": False}
    schemas["TenantUpdate"]["properties"]["limits"] = {"anyOf": [limits, {"type": "null"}], "default": None}


_NULLABLE_MS = {"type": ["integer", "null"]}
_TENANT = Schema.object(
    "Tenant",
    {
        "tenant_id": {"type": "string"},
        "name": {"type": "string"},
        "disabled": {"type": "boolean", "description": "its keys are refused (401) while true"},
        "limit_overrides": {"type": "object", "additionalProperties": {"type": "number"}},
        "limits": {
            "$ref": "#/components/schemas/TenantLimits",
            "description": "effective: [tenant_limits] with the overrides",
        },
        "created_ms": {"type": "integer"},
    },
    uses=(TenantLimits,),
)
# `agentos.tenancy.records.key_json`
_KEY_PROPERTIES: dict[str, Any] = {
    "key_id": {"type": "string", "description": "public: in lists and the access log"},
    "tenant_id": {"type": "string"},
    "name": {"type": "string"},
    "scopes": {"type": "array", "items": {"$ref": "#/components/schemas/Scope"}},
    "status": {"enum": ["active", "expired", "revoked"]},
    "created_ms": {"type": "integer"},
    "expires_ms": {**_NULLABLE_MS, "description": "null: never expires"},
    "revoked_ms": _NULLABLE_MS,
    "budget_per_day": {"type": "number", "description": "its own spending budget per UTC day; 0: none"},
    "budget_per_month": {"type": "number", "description": "per calendar month (UTC); 0: none"},
}
_KEY = Schema.object("ApiKey", _KEY_PROPERTIES, uses=(Scope,))
_KEY_CREATED = Schema.object(
    "ApiKeyCreated",
    {
        **_KEY_PROPERTIES,
        "key": {
            "type": "string",
            "pattern": "^aos_[0-9A-Za-z]{12}_[0-9A-Za-z]{36}$",
            "description": "the bearer key: shown here once, stored only as a keyed hash",
        },
    },
    uses=(Scope,),
)
_BAD_QUERY = {422: "A bad limit; the message names the parameter"}
_UNKNOWN_TENANT = {404: "Unknown tenant"}
_THE_KEY = {"answers": {200: json("The key (never the key itself)", _KEY)}, "errors": {404: "Unknown key"}}


def _registry(request: web.Request) -> TenantRegistry:
    require(request, Scope.ADMIN)
    return request.app[TENANTS]


@routes.post("/v1/admin/tenants")
@operation(
    "Create a tenant",
    body=TenantCreate,
    answers={201: json("The tenant", _TENANT)},
    errors=BAD_BODY | {409: "The id is taken"},
)
async def create_tenant(request: web.Request) -> web.Response:
    registry = _registry(request)
    body = await read_body(request, TenantCreate)
    tenant = await registry.create_tenant(body.tenant_id, name=body.name, limits=body.limits)
    return json_response(tenant_json(tenant, registry.defaults), status=201)


@routes.get("/v1/admin/tenants")
@operation("List tenants, by id", **listing("A page of tenants", "TenantPage", _TENANT, 100), errors=_BAD_QUERY)
async def list_tenants(request: web.Request) -> web.Response:
    registry = _registry(request)
    limit = page_limit(request, 100)
    tenants = registry.tenants(after=query_text(request, "after"), limit=limit)
    return page_response(tenants, limit, lambda t: tenant_json(t, registry.defaults), lambda t: t.tenant_id)


@routes.get("/v1/admin/tenants/{tenant_id}")
@operation("Read a tenant", answers={200: json("The tenant", _TENANT)}, errors=_UNKNOWN_TENANT)
async def get_tenant(request: web.Request) -> web.Response:
    registry = _registry(request)
    return json_response(tenant_json(registry.tenant(request.match_info["tenant_id"]), registry.defaults))


@routes.patch("/v1/admin/tenants/{tenant_id}")
@operation(
    "Change a tenant's name, limits or disabled flag (effective on the next request)",
    body=TenantUpdate,
    answers={200: json("The tenant", _TENANT)},
    errors=BAD_BODY | _UNKNOWN_TENANT,
)
async def update_tenant(request: web.Request) -> web.Response:
    registry = _registry(request)
    tenant_id = request.match_info["tenant_id"]
    registry.tenant(tenant_id)  # 404 before reading the body
    body = await read_body(request, TenantUpdate)
    tenant = await registry.update_tenant(tenant_id, name=body.name, limits=body.limits, disabled=body.disabled)
    return json_response(tenant_json(tenant, registry.defaults))


@routes.post("/v1/admin/keys")
@operation(
    "Create an API key; the answer is the only place the key appears",
    body=KeyCreate,
    answers={201: json("The key, with the key itself", _KEY_CREATED)},
    errors=BAD_BODY | _UNKNOWN_TENANT,
)
async def create_key(request: web.Request) -> web.Response:
    registry = _registry(request)
    body = await read_body(request, KeyCreate)
    budgets = (body.budget_per_day, body.budget_per_month)
    key, record = await registry.create_key(
        body.tenant_id, name=body.name, scopes=body.scopes, expires_in_s=body.expires_in_s, budgets=budgets
    )
    return json_response(key_json(record, registry.now_ms()) | {"key": key}, status=201)


@routes.get("/v1/admin/keys")
@operation(
    "List keys, by key_id",
    **listing("A page of keys", "ApiKeyPage", _KEY, 100, query("tenant_id", "only this tenant's")),
    errors=_BAD_QUERY,
)
async def list_keys(request: web.Request) -> web.Response:
    registry = _registry(request)
    limit = page_limit(request, 100)
    found = registry.keys(tenant_id=query_text(request, "tenant_id"), after=query_text(request, "after"), limit=limit)
    now = registry.now_ms()
    return page_response(found, limit, lambda k: key_json(k, now), lambda k: k.key_id)


@routes.get("/v1/admin/keys/{key_id}")
@operation("Read a key", **_THE_KEY)
async def get_key(request: web.Request) -> web.Response:
    registry = _registry(request)
    return json_response(key_json(registry.key(request.match_info["key_id"]), registry.now_ms()))


@routes.patch("/v1/admin/keys/{key_id}")
@operation(
    "Change a key's spending budgets",
    body=KeyUpdate,
    answers={200: json("The key (never the key itself)", _KEY)},
    errors=BAD_BODY | {404: "Unknown key"},
)
async def update_key(request: web.Request) -> web.Response:
    registry = _registry(request)
    body = await read_body(request, KeyUpdate)
    record = await registry.update_key(
        request.match_info["key_id"], budget_per_day=body.budget_per_day, budget_per_month=body.budget_per_month
    )
    return json_response(key_json(record, registry.now_ms()))


@routes.post("/v1/admin/keys/{key_id}/revoke")
@operation("Revoke a key, effective on the next request", **_THE_KEY)
async def revoke_key(request: web.Request) -> web.StreamResponse:
    registry = _registry(request)
    record = await registry.revoke_key(request.match_info["key_id"])
    return json_response(key_json(record, registry.now_ms()))


@routes.delete("/v1/admin/keys/{key_id}")
@operation("Revoke a key (the same as POST .../revoke)", **_THE_KEY)
async def delete_key(request: web.Request) -> web.StreamResponse:
    """The same as `revoke`: the row stays (the access log names its key_id), unusable."""
    return await revoke_key(request)


_ISSUERS_ERRORS: dict[int, Any] = (
    BAD_BODY
    | {
        400: f"{BAD_BODY[400]}; `invalid_issuer`: an algorithm other than RS256, ES256, EdDSA (none, HS*),"
        " a scope a user may not hold (admin), a JWKS or discovery URL the outbound rules refuse, a pair listed twice",
        409: "`issuer_taken`: another tenant's users sign in with that issuer and audience",
    }
    | _UNKNOWN_TENANT
)


def _issuers_of(request: web.Request, tenant_id: str) -> TenantIssuers:
    issuers = _registry(request).tenant(tenant_id).issuers
    configured = [i for i in request.app[SETTINGS].identity.issuers if i.tenant == tenant_id]
    return TenantIssuers(
        tenant_id, [IssuerSetting.of(issuer) for issuer in issuers], [IssuerSetting.of(i) for i in configured]
    )


@routes.get("/v1/admin/tenants/{tenant_id}/issuers")
@operation(
    "A tenant's identity providers (those set over this API, and the config file's)",
    answers={200: json("The tenant's identity providers", TenantIssuers)},
    errors=_UNKNOWN_TENANT,
)
async def get_issuers(request: web.Request) -> web.Response:
    return json_response(_issuers_of(request, request.match_info["tenant_id"]))


@routes.put("/v1/admin/tenants/{tenant_id}/issuers")
@operation(
    "Set a tenant's identity providers (the whole list; every node trusts them from the next request)",
    body=IssuersPut,
    answers={200: json("The tenant's identity providers", TenantIssuers)},
    errors=_ISSUERS_ERRORS,
)
async def put_issuers(request: web.Request) -> web.Response:
    registry = _registry(request)
    tenant_id = request.match_info["tenant_id"]
    registry.tenant(tenant_id)  # 404 before reading the body
    users = request.app.get(USERS)
    if users is None:  # a server built without the verifier (an app a test assembles)
        raise BadRequest("this server does not sign end users in")
    issuers = checked_issuers(tenant_id, (await read_body(request, IssuersPut)).issuers, users.policy)
    for issuer in issuers:
        holder = users.tenant_of(issuer.issuer, issuer.audience)
        if holder is not None and holder != tenant_id:
            raise IssuerTaken(issuer.issuer, issuer.audience, holder)
    await registry.set_issuers(tenant_id, issuers)
    return json_response(_issuers_of(request, tenant_id))


@routes.delete("/v1/admin/tenants/{tenant_id}/issuers")
@operation(
    "Remove a tenant's identity providers set over this API: their users' tokens are refused (401)",
    answers={204: Answer(description="Removed")},
    errors=_UNKNOWN_TENANT,
)
async def delete_issuers(request: web.Request) -> web.Response:
    registry = _registry(request)
    await registry.set_issuers(request.match_info["tenant_id"], ())
    return web.Response(status=204)
