"""The OpenAPI document: it describes exactly the routes there are, its references resolve,
and each request body matches the struct its handler decodes (so the two cannot drift)."""

from __future__ import annotations

from typing import Any

import aiohttp
import msgspec
import pytest

from agentos.agents.spec import AgentSpec
from agentos.api.admin import KeyCreate, TenantCreate, TenantUpdate
from agentos.api.body import AnswerCreate, RunCreate, SessionCreate, TurnCreate
from agentos.api.openapi import OPENAPI
from agentos.testing import RunningServer
from tests.api.helpers import assert_documented

# Every operation that reads a JSON body, and the type its handler decodes it into.
BODIES: dict[tuple[str, str], tuple[type[Any], str]] = {
    ("post", "/v1/sessions"): (SessionCreate, "SessionCreate"),
    ("post", "/v1/sessions/{session_id}/turns"): (TurnCreate, "TurnCreate"),
    ("post", "/v1/agents"): (AgentSpec, "AgentSpec"),
    ("post", "/v1/agents/{name}/runs"): (RunCreate, "RunCreate"),
    ("post", "/v1/runs/{run_id}/answer"): (AnswerCreate, "AnswerCreate"),
    ("post", "/v1/admin/tenants"): (TenantCreate, "TenantCreate"),
    ("patch", "/v1/admin/tenants/{tenant_id}"): (TenantUpdate, "TenantUpdate"),
    ("post", "/v1/admin/keys"): (KeyCreate, "KeyCreate"),
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
    assert {key for key, operation in operations().items() if "requestBody" in operation} == set(BODIES)


def _spec() -> dict[str, Any]:
    return msgspec.json.schema_components([AgentSpec])[1]["AgentSpec"]


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node["$ref"]] if "$ref" in node else []
        return own + [r for value in node.values() for r in _refs(value)]
    if isinstance(node, list):
        return [r for value in node for r in _refs(value)]
    return []
