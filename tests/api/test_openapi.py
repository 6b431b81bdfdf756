"""The OpenAPI document: it describes exactly the routes there are, its references resolve,
and each request body matches the struct its handler decodes (so the two cannot drift)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from agentos.agents.spec import AgentSpec
from agentos.api.body import AnswerCreate, RunCreate, SessionCreate, TurnCreate
from agentos.api.openapi import OPENAPI
from agentos.testing import RunningServer

# Every operation that reads a JSON body, and the type its handler decodes it into.
BODIES: dict[tuple[str, str], tuple[type[Any], str]] = {
    ("post", "/v1/sessions"): (SessionCreate, "SessionCreate"),
    ("post", "/v1/sessions/{session_id}/turns"): (TurnCreate, "TurnCreate"),
    ("post", "/v1/agents"): (AgentSpec, "AgentSpec"),
    ("post", "/v1/agents/{name}/runs"): (RunCreate, "RunCreate"),
    ("post", "/v1/runs/{run_id}/answer"): (AnswerCreate, "AnswerCreate"),
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
    for key, operation in operations().items():
        assert operation["summary"], key
        assert any(status.startswith("2") or status == "101" for status in operation["responses"]), key


@pytest.mark.parametrize("key", sorted(BODIES))
def test_a_request_body_matches_the_struct_its_handler_reads(key: tuple[str, str]) -> None:
    kind, name = BODIES[key]
    operation = operations()[key]
    assert operation["requestBody"]["content"]["application/json"]["schema"] == {"$ref": f"#/components/schemas/{name}"}
    documented = OPENAPI["components"]["schemas"][name]
    (actual,) = msgspec.json.schema_components([kind])[1].values() if kind is not AgentSpec else [_spec()]
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
