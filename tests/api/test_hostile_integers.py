"""Integers past 64 bits in every integer the OpenAPI document declares, on both stores (issue 14).

SQLite raised `OverflowError` on a cursor of 2**63 after the event stream's 200 had been sent.
The sweeps here are driven by the document: every integer query parameter and `Last-Event-ID`
of every operation, and every integer field of every JSON body, so a route or field added later
is tried without editing this file (a path parameter this file cannot fill fails it loudly).
A parameter gets the 400 or 422 its operation documents, with the JSON error body, before any
stream starts; a body field has a documented maximum and a 4xx naming it past that maximum.
The largest values taken are in test_limit_maxima.py."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import aiohttp
import msgspec

from agentos.api.body import MAX_AFTER
from agentos.testing import RunningServer
from tests.api.helpers import OPENAPI, new_session
from tests.api.test_hostile_requests import get, post, raw_request
from tests.knowledge.http import DIMS

# 2**63 and up; 19 nines pass a digits-only check and still overflow; one past the documented maximum
HUGE = [str(2**63), str(2**64), "9" * 19, str(10**30), str(-(2**63) - 1), str(MAX_AFTER + 1)]
HUGE_JSON = [2**63, 2**64, 10**30, -(2**63) - 1]

_PARAMETERS = OPENAPI["components"].get("parameters", {})
_SCHEMAS = OPENAPI["components"]["schemas"]


def _deref(node: dict[str, Any], section: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = section[node["$ref"].rsplit("/", 1)[1]]
    return node


def operations() -> Iterator[tuple[str, str, dict[str, Any], list[dict[str, Any]]]]:
    """(method, path, operation, its parameters resolved) of every operation in the document."""
    for path, item in OPENAPI["paths"].items():
        shared = item.get("parameters", [])
        for method, operation in item.items():
            if method != "parameters":
                parameters = [_deref(p, _PARAMETERS) for p in shared + operation.get("parameters", [])]
                yield method.upper(), path, operation, parameters


def integer_parameters(parameters: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Query and header parameters that hold an integer (`Last-Event-ID`: a seq, maybe prefixed)."""
    return [
        p
        for p in parameters
        if p["in"] in ("query", "header")
        and (_deref(p.get("schema", {}), _SCHEMAS).get("type") == "integer" or p["name"] == "Last-Event-ID")
    ]


def integer_fields(schema: dict[str, Any], at: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """(path, documented maximum) of the integer fields in a body schema (`*`: any key of a map)."""
    schema = _deref(schema, _SCHEMAS)
    if schema.get("type") == "integer" and at:
        yield at, schema.get("maximum")
    for name, field in schema.get("properties", {}).items():
        yield from integer_fields(field, (*at, name))
    if isinstance(schema.get("additionalProperties"), dict):
        yield from integer_fields(schema["additionalProperties"], (*at, "*"))
    for key in ("anyOf", "oneOf", "allOf"):
        for option in schema.get(key, []):
            yield from integer_fields(option, at)


async def resources(server: RunningServer, http: aiohttp.ClientSession) -> dict[str, str]:
    """A value for each path parameter: a resource of each kind (the collection `docs` exists)."""
    sid = await new_session(http, server.url)
    async with http.post(f"{server.url}/v1/sessions/{sid}/turns", json={"input": "hi"}) as r:
        turn_id = (await r.json())["turn_id"]
    async with http.post(f"{server.url}/v1/agents", json={"name": "a", "tools": []}) as r:
        assert r.status == 201, await r.text()
    async with http.post(f"{server.url}/v1/agents/a/runs", json={"input": "x"}) as r:
        run_id = (await r.json())["run_id"]
    async with http.post(f"{server.url}/v1/triggers", json={"agent": "a"}) as r:
        trigger_id = (await r.json())["trigger_id"]
    return {
        "session_id": sid,
        "turn_id": turn_id,
        "run_id": run_id,
        "trigger_id": trigger_id,
        "tenant_id": "default",
        "name": "docs",  # of a collection: the only `{name}` route with integers
    }


def fill(path: str, values: dict[str, str]) -> str:
    for name, value in values.items():
        path = path.replace("{" + name + "}", value)
    assert "{" not in path, f"no value for a path parameter of {path}: add one to resources()"
    return path


async def test_every_integer_parameter_past_64_bits_is_a_documented_4xx(
    any_store: RunningServer, http: aiohttp.ClientSession
) -> None:
    server = any_store
    values = await resources(server, http)
    swept = 0
    for method, path, operation, parameters in operations():
        for parameter in integer_parameters(parameters):
            assert method == "GET", (method, path)  # every one today; a POST would need a body here
            documented = {int(s) for s in operation["responses"] if s in ("400", "422")}
            assert documented, f"{method} {path} documents no 400/422 for {parameter['name']!r}"
            for value in HUGE:
                if parameter["in"] == "query":
                    request = get(f"{fill(path, values)}?{parameter['name']}={value}")
                else:
                    request = get(fill(path, values), f"{parameter['name']}: {value}".encode())
                status, headers, body = await raw_request(server.url, request)
                where = (method, path, parameter["name"], value, status, body[:200])
                assert status in documented, where
                assert headers["content-type"].startswith("application/json"), where
                error = msgspec.json.decode(body)["error"]
                assert error["code"] in ("invalid_input", "bad_request") and error["message"], where
                swept += 1
    assert swept >= 13 * len(HUGE)  # 11 operations, 13 parameters when this was written


# A body each operation takes; the sweep puts a huge integer at one field of it at a time.
BASES: dict[tuple[str, str], dict[str, Any]] = {
    ("POST", "/v1/agents"): {"name": "n", "tools": []},
    ("POST", "/v1/admin/tenants"): {"tenant_id": "n"},
    ("PATCH", "/v1/admin/tenants/{tenant_id}"): {},
    ("POST", "/v1/admin/keys"): {"tenant_id": "default", "scopes": ["sessions:read"]},
    ("POST", "/v1/collections"): {"name": "n", "embedding_model": "mock-embed", "dimensions": DIMS},
    ("POST", "/v1/collections/{name}/documents"): {"content": "some text", "content_type": "text/plain"},
    ("POST", "/v1/collections/{name}/query"): {"query": "some text"},
    ("POST", "/v1/chat/completions"): {"model": "mock-1", "messages": [{"role": "user", "content": "hi"}]},
    ("POST", "/v1/schedules"): {"agent": "a", "input": "x", "every_s": 3600, "paused": True},
    ("POST", "/v1/runs/{run_id}/fork"): {"at_seq": 0},
    ("POST", "/v1/tokens"): {"session_ids": ["ses_none"]},
}
READ_BACK = ["/v1/agents", "/v1/admin/tenants", "/v1/admin/keys", "/v1/collections", "/v1/collections/docs/documents"]
READ_BACK += ["/v1/schedules"]


def with_value(base: dict[str, Any], field: tuple[str, ...], value: int, unique: str) -> dict[str, Any]:
    body = copy.deepcopy(base)
    for key in ("name", "tenant_id"):
        if body.get(key) == "n":
            body[key] = unique  # each body creates its own
    node = body
    for key in field[:-1]:
        node = node.setdefault(key, {})
    node["n" if field[-1] == "*" else field[-1]] = value
    return body


async def test_every_integer_body_field_past_its_documented_maximum_is_a_4xx_naming_it(
    any_store: RunningServer, http: aiohttp.ClientSession
) -> None:
    """Every integer a body may hold has a `maximum` in the document (2**63 was taken as a tenant's
    limit or an agent's `token_budget`), and a value past it, or past 64 bits, is refused with an
    error that names the field; what was taken before reads back."""
    server = any_store
    values = await resources(server, http)
    swept = 0
    for method, path, operation, _ in operations():
        content = operation.get("requestBody", {}).get("content", {}).get("application/json")
        fields = list(integer_fields(content["schema"])) if content else []
        if not fields:
            continue
        assert (method, path) in BASES, f"{method} {path} has integer fields {fields}: add a body to BASES"
        for field, maximum in fields:
            assert isinstance(maximum, int) and maximum < 2**63, f"{method} {path} {field}: no documented maximum"
            for value in [maximum + 1, *HUGE_JSON]:
                swept += 1
                body = with_value(BASES[method, path], field, value, f"big{swept}")
                request = post(fill(path, values), msgspec.json.encode(body))
                status, headers, answer = await raw_request(server.url, request.replace(b"POST", method.encode(), 1))
                where = (method, path, field, value, status, answer[:300])
                assert 400 <= status < 500, where
                message = msgspec.json.decode(answer)["error"]["message"]
                assert field[-1] in message or field[-1] == "*", where
    assert swept >= 30 * (1 + len(HUGE_JSON))
    for path in READ_BACK:  # what was taken is read again: no failure on the way out either
        status, _, answer = await raw_request(server.url, get(path))
        assert status == 200, (path, answer[:200])
