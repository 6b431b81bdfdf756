"""The OpenAPI 3.1 document served at /openapi.json, written from the routes the app serves.

Each route's handler carries its description (`agentos.api.routes.operation`); the bodies'
schemas are msgspec's JSON Schema of the structs the handlers decode and encode, or the small
hand-written `Schema`s beside handlers that answer a dict. What every keyed operation shares is
added here, once, from the operation's `open` and `limits`:

- the bearer scheme, its 401 (with WWW-Authenticate) and the scope's 403;
- the 415 of a JSON body sent as another type (`agentos.api.body.read_body`);
- the 503 of a store that cannot be reached, on every `/v1/` operation;
- the 429 of the request limits and the `RateLimit` headers on every answer
  (`agentos.api.ratelimit`), and the quota 403 of an operation that starts work;
- on the OpenAI routes (by path, as `agentos.api.openai_errors` decides), OpenAI's error body
  on every error, no 422 (a 400), and a Retry-After capped at 60.

tests/api/test_openapi.py checks that every served route is described, that the request bodies
are the handlers' structs, and real answers against the document.
"""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Callable, Iterable
from typing import Any

import msgspec
from aiohttp import web

from agentos.api.openai_errors import is_openai_path
from agentos.api.routes import (
    REF_TEMPLATE,
    REFINEMENTS,
    RETRY_AFTER,
    TAGS,
    Answer,
    Body,
    Operation,
    Schema,
    described,
    nullable,
    obj,
    path_parameter,
    ref,
)

# (method, path, handler) of a served route.
Route = tuple[str, str, Callable[..., Any]]

_INFO = {
    "title": "Agent OS",
    "version": "0.1.0",
    "description": (
        "Sessions, streamed turns, agents and their runs. Errors are `{error: {code, message}}`;"
        " lists are `{data, next_cursor}`. The WebSocket protocol and the event streams are in docs/api.md."
    ),
}
BEARER = {
    "type": "http",
    "scheme": "bearer",
    "bearerFormat": "aos_<key_id>_<secret><checksum>",
    "description": "An API key (POST /v1/admin/keys) or the server's api_token; never in the URL. docs/security.md",
}
ERROR = Schema.object(
    "Error",
    {
        "error": obj(
            {
                "code": {"type": "string"},
                "message": {"type": "string"},
                "error_id": {"type": "string", "description": "internal errors only: quote it to the operator"},
            },
            ["code", "message"],
        )
    },
)
OPENAI_ERROR = Schema.object(
    "OpenAIError",
    {
        "error": obj(
            {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": nullable("string"),
                "code": nullable("string"),
            }
        )
    },
)
_WWW = {"WWW-Authenticate": {"schema": {"type": "string"}, "description": 'Bearer realm="agentos"[, error=...]'}}
_UNAUTHORIZED = "Missing, malformed, unknown, expired or revoked bearer key"
_FORBIDDEN = "The key lacks the scope this operation needs (insufficient_scope)"
_BUDGET = (
    "`budget_exceeded`: a spending budget (the tenant's or the key's per day or month, the agent's"
    " per run) cannot hold the first model call's worst case; the message names it; Retry-After"
    " when only the next day or month frees it (docs/providers.md, Budgets)"
)
_NOT_JSON = "`unsupported_media_type`: a body not sent as `Content-Type: application/json`"
_UNAVAILABLE = (
    "`store_unavailable`: the database cannot be reached (refused, dropped, or slower than its"
    " bound); nothing was acknowledged, retry after Retry-After"
)
_REQUEST_CODES = "`key_rate_limited` (the key's requests per minute) or `tenant_rate_limited` (all its keys')"
RATE_HEADERS = {
    "RateLimit-Policy": {
        "description": (
            'The caller\'s request limits, a Structured Field list: `"key";q=100;w=60, "tenant";q=1000;w=60`'
            " (q requests per w seconds, burst q); only when a limit is configured"
        ),
        "schema": {"type": "string"},
    },
    "RateLimit": {
        "description": 'What is left of each policy now: `"key";r=99;t=1` (r requests left, t seconds until one more)',
        "schema": {"type": "string"},
    },
}
_RETRY_AFTER_60 = {
    "description": "Seconds to wait before trying again; at most 60, the most the OpenAI SDKs wait for",
    "schema": {"type": "integer", "minimum": 1, "maximum": 60},
}


def served_routes(router: web.UrlDispatcher) -> tuple[Route, ...]:
    """The app's routes, HEAD left out (aiohttp adds one beside each GET)."""
    return tuple(
        (route.method.lower(), route.resource.canonical, route.handler)
        for route in router.routes()
        if route.method != "HEAD" and route.resource is not None
    )


def table_routes(tables: Iterable[web.RouteTableDef]) -> tuple[Route, ...]:
    """The routes of route tables, as `served_routes` gives them once the app has them."""
    return tuple(
        (route.method.lower(), route.path, route.handler)
        for table in tables
        for route in table
        if isinstance(route, web.RouteDef)
    )


@functools.cache
def document_bytes(routes: tuple[Route, ...]) -> bytes:
    """The document as served: written once per set of routes."""
    return msgspec.json.encode(document(routes))


def document(routes: Iterable[Route]) -> dict[str, Any]:
    """The OpenAPI document of `routes`.

    Raises:
        ConfigError: a route's handler has no description."""
    schemas = _Components()
    paths: dict[str, dict[str, Any]] = {}
    for method, path, handler in routes:
        item = paths.setdefault(path, _path_item(path))
        item[method] = _operation(path, described(handler), schemas)
    return {
        "openapi": "3.1.0",
        "info": _INFO,
        "tags": [{"name": name, "description": description} for name, description in TAGS.items()],
        "paths": paths,
        "components": {"securitySchemes": {"bearer": BEARER}, "schemas": schemas.build()},
        "security": [{"bearer": []}],
    }


def _path_item(path: str) -> dict[str, Any]:
    names = re.findall(r"\{(\w+)\}", path)
    return {"parameters": [path_parameter(name) for name in names]} if names else {}


class _Components:
    """The schemas the operations refer to: msgspec's for structs, the hand-written ones as they are."""

    def __init__(self) -> None:
        self._structs: set[type] = set()
        self._hand: dict[str, dict[str, Any]] = {}

    def use(self, body: Body) -> dict[str, str]:
        """Remember `body` (and what it refers to) as a component; its `$ref`."""
        if not isinstance(body, Schema):
            self._structs.add(body)
            return ref(body.__name__)
        if self._hand.setdefault(body.name, body.body) is not body.body:
            assert self._hand[body.name] == body.body, f"two schemas named {body.name!r}"
        for used in body.uses:
            self.use(used)
        return body.ref

    def build(self) -> dict[str, Any]:
        structs = sorted(self._structs, key=operator.attrgetter("__name__"))  # a stable document
        _, generated = msgspec.json.schema_components(structs, ref_template=REF_TEMPLATE)
        components = dict(generated)
        for name, refine in REFINEMENTS.items():
            if name in components:
                refine(components)
        return components | self._hand


def _operation(path: str, operation: Operation, schemas: _Components) -> dict[str, Any]:
    answers = {str(status): _answer(answer, schemas) for status, answer in operation.answers.items()}
    openai = is_openai_path(path)  # `agentos.api.openai_errors` answers their errors in OpenAI's shape
    error = schemas.use(OPENAI_ERROR if openai else ERROR)
    for status, described_error in operation.errors.items():
        answer = described_error if isinstance(described_error, Answer) else Answer(description=described_error)
        answers[str(status)] = _answer(answer, schemas) | {"content": {"application/json": {"schema": error}}}
    out: dict[str, Any] = {"summary": operation.summary, "tags": [operation.tag]}
    if operation.description:
        out["description"] = operation.description
    if operation.parameters:
        out["parameters"] = list(operation.parameters)
    if operation.body is not None or operation.body_content:
        out["requestBody"] = _request_body(operation, schemas)
    out["responses"] = answers
    content = {"application/json": {"schema": error}}
    if path.startswith("/v1/"):  # every /v1/ operation reads or writes a store
        old = answers.get("503")
        description = f"{old['description']}; or {_UNAVAILABLE}" if old else _UNAVAILABLE
        answers["503"] = {"description": description, "content": content, "headers": {"Retry-After": RETRY_AFTER}}
    if operation.open:
        out["security"] = []
    else:
        _keyed(operation, out, content, openai=openai)
    return out


def _answer(answer: Answer, schemas: _Components) -> dict[str, Any]:
    out: dict[str, Any] = {"description": answer.description}
    if answer.content:
        out["content"] = {
            media_type: {"schema": body if isinstance(body, dict) else schemas.use(body)}
            for media_type, body in answer.content.items()
        }
    if answer.headers:
        out["headers"] = dict(answer.headers)
    return out


def _request_body(operation: Operation, schemas: _Components) -> dict[str, Any]:
    content: dict[str, Any] = {}
    if operation.body is not None:
        content["application/json"] = {"schema": schemas.use(operation.body)}
    content |= operation.body_content
    body: dict[str, Any] = {"content": content} | ({"required": True} if operation.body_required else {})
    return body | ({"description": operation.body_description} if operation.body_description else {})


def _keyed(operation: Operation, out: dict[str, Any], content: dict[str, Any], *, openai: bool) -> None:
    """What every keyed operation answers (the module docstring's list); `content`: its error body."""
    responses = out["responses"]
    if "requestBody" in out and set(out["requestBody"]["content"]) == {"application/json"}:
        responses.setdefault("415", {"description": _NOT_JSON, "content": content})
    out["security"] = [{"bearer": []}]
    responses.setdefault("401", {"description": _UNAUTHORIZED, "headers": _WWW, "content": content})
    responses.setdefault("403", {"description": _FORBIDDEN, "content": content})
    more = operation.limits.more_429
    responses["429"] = {
        "description": f"Over a rate limit: {_REQUEST_CODES}" + (f"; {more}" if more else ""),
        "content": content,
        "headers": {"Retry-After": _RETRY_AFTER_60 if openai else RETRY_AFTER},
    }
    if quota := operation.limits.quota:
        old = responses.get("403")
        description = f"{old['description']}; or {quota}" if old else f"A quota is used up: {quota}"
        responses["403"] = {"description": description, "content": content, "headers": {"Retry-After": RETRY_AFTER}}
    if operation.limits.budgets:
        responses["402"] = {"description": _BUDGET, "content": content, "headers": {"Retry-After": RETRY_AFTER}}
    if openai:
        responses.pop("422", None)  # answered as 400 (`agentos.api.openai_errors`)
    for answer in responses.values():
        answer["headers"] = {**answer.get("headers", {}), **RATE_HEADERS}
