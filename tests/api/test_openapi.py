"""The OpenAPI document: written from the routes there are (a route without a description is
an error), its references resolve, and each request body is the struct its handler decodes."""

from __future__ import annotations

from typing import Any

import aiohttp
import msgspec
import pytest
from aiohttp import web
from jsonschema import Draft202012Validator

from agentos.api.admin import IssuersPut, KeyCreate, KeyUpdate, TenantCreate, TenantUpdate
from agentos.api.app import ROUTES
from agentos.api.body import (
    MAX_AFTER,
    MAX_PAGE_LIMIT,
    AnswerCreate,
    RunCreate,
    RunFork,
    RunSteer,
    SessionCreate,
    TurnCreate,
)
from agentos.api.browser_tokens import TokenCreate
from agentos.api.openapi import document, served_routes, table_routes
from agentos.api.schedules import ScheduleCreate
from agentos.api.triggers import TriggerCreate
from agentos.config.agents import AgentSpec
from agentos.config.tenants import TenantLimits
from agentos.errors import ConfigError, InvalidInput
from agentos.knowledge import filters
from agentos.knowledge.inputs import CollectionCreate, DocumentUpload, QueryRequest
from agentos.testing import RunningServer
from tests.api.helpers import OPENAPI, assert_documented

# Every operation that reads a JSON body, and the type its handler decodes it into.
BODIES: dict[tuple[str, str], tuple[type[Any], str]] = {
    ("post", "/v1/sessions"): (SessionCreate, "SessionCreate"),
    ("post", "/v1/sessions/{session_id}/turns"): (TurnCreate, "TurnCreate"),
    ("post", "/v1/agents"): (AgentSpec, "AgentSpec"),
    ("post", "/v1/agents/{name}/runs"): (RunCreate, "RunCreate"),
    ("post", "/v1/runs/{run_id}/answer"): (AnswerCreate, "AnswerCreate"),
    ("post", "/v1/runs/{run_id}/steer"): (RunSteer, "RunSteer"),
    ("post", "/v1/runs/{run_id}/fork"): (RunFork, "RunFork"),
    ("post", "/v1/admin/tenants"): (TenantCreate, "TenantCreate"),
    ("patch", "/v1/admin/tenants/{tenant_id}"): (TenantUpdate, "TenantUpdate"),
    ("post", "/v1/admin/keys"): (KeyCreate, "KeyCreate"),
    ("patch", "/v1/admin/keys/{key_id}"): (KeyUpdate, "KeyUpdate"),
    ("put", "/v1/admin/tenants/{tenant_id}/issuers"): (IssuersPut, "IssuersPut"),
    ("post", "/v1/triggers"): (TriggerCreate, "TriggerCreate"),
    ("post", "/v1/schedules"): (ScheduleCreate, "ScheduleCreate"),
    ("post", "/v1/tokens"): (TokenCreate, "TokenCreate"),
    ("post", "/v1/collections"): (CollectionCreate, "CollectionCreate"),
    ("post", "/v1/collections/{name}/documents"): (DocumentUpload, "DocumentUpload"),
    ("post", "/v1/collections/{name}/query"): (QueryRequest, "QueryRequest"),
}
# Operations whose body is whatever the sender sends (any JSON, no struct): a trigger's delivery.
FREE_BODIES = {("post", "/v1/triggers/{trigger_id}/events")}
# The OpenAI-compatible routes' bodies: generated from their structs, which take the fields an SDK
# may add (sampling parameters) without listing them; their errors are OpenAI's (`OpenAIError`).
OPENAI_BODIES = {
    ("post", "/v1/chat/completions"): "ChatCompletionCreate",
    ("post", "/v1/responses"): "ResponseCreate",
}


def operations() -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (method, path): operation
        for path, item in OPENAPI["paths"].items()
        for method, operation in item.items()
        if method != "parameters"
    }


async def test_the_document_matches_the_routes(server: RunningServer, http) -> None:
    async with http.get(f"{server.url}/openapi.json") as r:
        assert msgspec.json.decode(await r.read()) == msgspec.json.decode(msgspec.json.encode(OPENAPI))
    routes = {
        (route.method.lower(), route.resource.canonical)
        for route in server.app.router.routes()
        if route.method != "HEAD" and route.resource is not None
    }
    assert routes == set(operations())
    assert {"/v1/agents", "/v1/agents/{name}/runs", "/v1/runs/{run_id}/events"} <= {path for _, path in routes}
    assert document(served_routes(server.app.router)) == OPENAPI  # the app's router, not only its tables


def test_a_route_without_a_description_is_an_error() -> None:
    """Every route is described: the document cannot be written around one that is not."""
    table = web.RouteTableDef()

    @table.get("/v1/undescribed")
    async def undescribed(request: web.Request) -> web.Response:
        raise AssertionError("never called")

    with pytest.raises(ConfigError, match="undescribed"):
        document(table_routes([*ROUTES, table]))


def test_every_reference_resolves() -> None:
    schemas = OPENAPI["components"]["schemas"]
    refs = _refs(OPENAPI)
    assert refs, "the document references its schemas"
    for target in refs:
        assert target.removeprefix("#/components/schemas/") in schemas, target


def test_every_operation_says_what_it_answers() -> None:
    tags = [tag["name"] for tag in OPENAPI["tags"]]
    for key, operation in operations().items():
        assert operation["summary"], key
        assert len(operation["tags"]) == 1 and operation["tags"][0] in tags, key  # its group on /docs
        assert any(status.startswith("2") or status == "101" for status in operation["responses"]), key


# Answers without a body: a WebSocket upgrade, a deletion.
NO_CONTENT = {"101", "204"}


def test_every_operation_has_request_and_response_schemas() -> None:
    """Every answer of every route says its media type and schema (so /docs can show it), and
    every parameter has a schema; the bodies are checked against the structs below."""
    for (method, path), operation in operations().items():
        for status, response in operation["responses"].items():
            if status in NO_CONTENT:
                assert "content" not in response, (method, path, status)
                continue
            assert response.get("content"), (method, path, status, "no response schema")
            for media_type, content in response["content"].items():
                assert content.get("schema"), (method, path, status, media_type)
        for parameter in [*OPENAPI["paths"][path].get("parameters", ()), *operation.get("parameters", ())]:
            assert parameter.get("schema"), (method, path, parameter["name"])


async def test_real_answers_match_the_documented_schemas(server: RunningServer, http) -> None:
    """Each JSON route, called for real, answers what the document says for that status."""
    url = server.url
    async with http.post(f"{url}/v1/sessions", json={"metadata": {"k": 1}}) as r:
        sid = (await _checked(r, "post", "/v1/sessions"))["id"]
    session = "/v1/sessions/{session_id}"
    # (method, path template, body or query, the template's values when not the real ones)
    calls: list[tuple[str, str, dict[str, Any] | None, dict[str, str]]] = [
        ("post", session + "/turns", {"input": "hi"}, {}),
        ("delete", session + "/turn", None, {}),
        ("get", session, None, {}),
        ("get", session, None, {"session_id": "nobody"}),
        ("get", session + "/messages", None, {}),
        ("get", session + "/events", {"limit": "0"}, {}),
        ("get", "/v1/sessions", None, {}),
        ("get", "/v1/agents", None, {}),
        ("post", "/v1/agents", {"name": "helper", "tools": ["ask_human"]}, {}),
        ("get", "/v1/agents/{name}", None, {}),
        ("get", "/v1/agents/{name}", None, {"name": "nobody"}),
        ("post", "/v1/agents/{name}/runs", {"input": "go"}, {}),
        ("get", "/v1/runs/{run_id}", None, {}),
        ("post", "/v1/runs/{run_id}/terminate", None, {}),
        ("post", "/v1/runs/{run_id}/answer", {"operation_id": "op"}, {}),
        ("post", "/v1/admin/tenants", {"tenant_id": "acme", "limits": {"weight": 2}}, {}),
        ("post", "/v1/admin/tenants", {"tenant_id": "acme"}, {}),
        ("get", "/v1/admin/tenants", None, {}),
        ("patch", "/v1/admin/tenants/{tenant_id}", {"disabled": True}, {}),
        ("get", "/v1/admin/tenants/{tenant_id}", None, {"tenant_id": "nobody"}),
        ("post", "/v1/admin/keys", {"tenant_id": "acme", "expires_in_s": 60}, {}),
        ("get", "/v1/admin/keys", {"tenant_id": "acme"}, {}),
        ("get", "/v1/admin/keys/{key_id}", None, {}),
        ("post", "/v1/admin/keys/{key_id}/revoke", None, {}),
        ("delete", "/v1/admin/keys/{key_id}", None, {"key_id": "nokey"}),
        ("get", "/v1/usage", {"group_by": "tenant,model,day"}, {}),
        ("get", "/v1/usage", {"group_by": "model,nope"}, {}),
        ("get", "/healthz", None, {}),
        ("get", "/readyz", None, {}),
    ]
    values = {"session_id": sid, "name": "helper", "run_id": "", "tenant_id": "acme", "key_id": ""}
    for method, template, body, own in calls:
        path = template.format(**(values | own))
        query, json_body = (body, None) if method == "get" else (None, body)
        async with http.request(method, url + path, json=json_body, params=query) as r:
            answer = await _checked(r, method, template)
        values["run_id"] = answer.get("run_id", values["run_id"])
        values["key_id"] = answer.get("key_id", values["key_id"])
    assert values["run_id"]


async def _checked(response: aiohttp.ClientResponse, method: str, template: str) -> dict[str, Any]:
    """The response's JSON, checked against the schema documented for its status."""
    documented = OPENAPI["paths"][template][method]["responses"][str(response.status)]
    assert response.content_type in documented["content"], (method, template, response.status)
    schema = documented["content"][response.content_type]["schema"]
    body: dict[str, Any] = await response.json()
    assert_documented(body, schema["$ref"].removeprefix("#/components/schemas/"))
    return body


@pytest.mark.parametrize("key", sorted(BODIES))
def test_a_request_body_matches_the_struct_its_handler_reads(key: tuple[str, str]) -> None:
    kind, name = BODIES[key]
    operation = operations()[key]
    assert operation["requestBody"]["content"]["application/json"]["schema"] == {"$ref": f"#/components/schemas/{name}"}
    documented = OPENAPI["components"]["schemas"][name]
    actual = msgspec.json.schema_components([kind])[1][name] if kind is not AgentSpec else _spec()
    assert set(documented["properties"]) == set(actual["properties"])
    assert set(documented.get("required", ())) == set(actual.get("required", ()))
    assert documented.get("additionalProperties") is False  # unknown fields are refused: say so


def test_only_those_operations_take_a_body() -> None:
    taking = {key for key, operation in operations().items() if "requestBody" in operation}
    assert taking == set(BODIES) | FREE_BODIES | set(OPENAI_BODIES)


@pytest.mark.parametrize("key", sorted(OPENAI_BODIES))
def test_an_openai_body_is_its_struct(key: tuple[str, str]) -> None:
    name = OPENAI_BODIES[key]
    assert operations()[key]["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": f"#/components/schemas/{name}"
    }
    assert OPENAPI["components"]["schemas"][name]["required"] == ["model", "messages" if "Chat" in name else "input"]


def _spec() -> dict[str, Any]:
    spec: dict[str, Any] = msgspec.json.schema_components([AgentSpec])[1]["AgentSpec"]
    return spec


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node["$ref"]] if "$ref" in node else []
        return own + [r for value in node.values() for r in _refs(value)]
    if isinstance(node, list):
        return [r for value in node for r in _refs(value)]
    return []


# The operations anyone may call: no bearer key (a trigger's delivery is signed instead).
OPEN_ROUTES = {
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/openapi.json"),
    ("get", "/docs"),
    ("get", "/docs/{asset}"),
    ("get", "/console"),
    ("get", "/console/{asset}"),
    ("post", "/v1/triggers/{trigger_id}/events"),
    ("get", "/.well-known/jwks.json"),
}
ERROR = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
OPENAI_ERROR = {"application/json": {"schema": {"$ref": "#/components/schemas/OpenAIError"}}}


def error_of(path: str) -> dict[str, Any]:
    """The error body an operation documents: OpenAI's on the OpenAI routes, ours elsewhere."""
    return OPENAI_ERROR if path.startswith(("/v1/models", "/v1/chat/", "/v1/responses")) else ERROR


def test_the_open_routes_and_only_they_declare_no_security() -> None:
    assert OPENAPI["security"] == [{"bearer": []}]
    assert OPENAPI["components"]["securitySchemes"]["bearer"] | {"description": ""} == {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "aos_<key_id>_<secret><checksum>",
        "description": "",
    }
    assert {key for key, operation in operations().items() if operation.get("security") == []} == OPEN_ROUTES
    for key in OPEN_ROUTES:
        responses = operations()[key]["responses"]
        assert "429" not in responses, key  # no key: no request limit
        assert all("RateLimit" not in answer.get("headers", {}) for answer in responses.values()), key


def test_every_protected_operation_documents_its_key_and_its_limits() -> None:
    """401 (with WWW-Authenticate), 403 (a scope or a quota), 429 (with Retry-After), and the
    RateLimit headers on every answer: what `agentos.api.ratelimit` and the auth middleware send."""
    for key, operation in operations().items():
        if key in OPEN_ROUTES:
            continue
        responses = operation["responses"]
        assert operation["security"] == [{"bearer": []}], key
        assert "WWW-Authenticate" in responses["401"]["headers"], key
        assert "Retry-After" in responses["429"]["headers"], key
        retry_after = {"type": "integer", "minimum": 1} | ({"maximum": 60} if error_of(key[1]) == OPENAI_ERROR else {})
        assert responses["429"]["headers"]["Retry-After"]["schema"] == retry_after, key
        for status in ("401", "403", "429"):
            assert responses[status]["content"] == error_of(key[1]), (key, status)
        for status, answer in responses.items():
            assert {"RateLimit", "RateLimit-Policy"} <= set(answer.get("headers", {})), (key, status)


def test_every_error_body_is_the_error_schema() -> None:
    """One shape for every 4xx and 5xx: `{"error": {"code", "message"}}` (OpenAI's on its routes);
    /readyz's 503 is its health."""
    for (method, path), operation in operations().items():
        for status, answer in operation["responses"].items():
            if int(status) >= 400 and (method, path, status) != ("get", "/readyz", "503"):
                assert answer["content"] == error_of(path), (method, path, status)
    assert set(OPENAPI["components"]["schemas"]["Error"]["required"]) == {"error"}


def test_list_bounds_are_what_the_server_takes() -> None:
    """`limit` from 1 to MAX_PAGE_LIMIT, integer cursors from 0 to MAX_AFTER (`agentos.api.body`),
    and every operation that takes them documents the 4xx of a value outside."""
    seen = 0
    for (method, path), operation in operations().items():
        parameters = [*OPENAPI["paths"][path].get("parameters", ()), *operation.get("parameters", ())]
        for parameter in parameters:
            schema = parameter["schema"]
            if parameter["name"] == "limit":
                assert (schema["minimum"], schema["maximum"]) == (1, MAX_PAGE_LIMIT), (method, path)
                assert "422" in operation["responses"], (method, path)
                seen += 1
            elif parameter["in"] != "path" and schema.get("type") == "integer":
                assert (schema["minimum"], schema["maximum"]) == (0, MAX_AFTER), (method, path, parameter["name"])
                assert {"400", "422"} & set(operation["responses"]), (method, path)
    assert seen >= 8


def test_the_documented_limit_overrides_are_the_known_limits() -> None:
    """Found by positive_data_acceptance: any name was documented, and an unknown one is a 422."""
    for body in ("TenantCreate", "TenantUpdate"):
        limits = OPENAPI["components"]["schemas"][body]["properties"]["limits"]
        limits = limits["anyOf"][0] if "anyOf" in limits else limits
        assert set(limits["properties"]) == set(TenantLimits.__struct_fields__), body
        assert limits["additionalProperties"] is False, body


@pytest.mark.parametrize(
    "value",
    [
        {"k": 1},
        {"a.b-c_1": {"$in": ["x", 2, 2.5, True]}},
        {"": 1},
        {"k": None},
        {"k": {"$in": []}},
        {"k": {"$in": [1], "x": 1}},
        {"k": [1]},
        {"k": 2**63},
        {"k": "a\x00"},
        {f"k{i}": 1 for i in range(17)},
    ],
)
def test_the_documented_filter_is_what_the_parser_takes(value: dict[str, Any]) -> None:
    """Found by positive_data_acceptance: `filter` was documented as any object."""
    schema = {"$ref": "#/components/schemas/QueryRequest", "components": OPENAPI["components"]}
    documented = Draft202012Validator(schema).is_valid({"query": "q", "filter": value})
    try:
        filters.parse_filter(value)
        accepted = True
    except InvalidInput:
        accepted = False
    assert documented == accepted
