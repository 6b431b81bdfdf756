"""Rate limits over a real server: requests per key and per tenant, turns and runs per tenant.

The limiters run on the server's clock, a FakeClock here: the tests move time, never sleep.
The RateLimit headers are parsed as RFC 9651 Structured Fields (tests/api/structured_fields.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import aiohttp

from agentos.api.ratelimit import Limiters
from agentos.config.tenants import TenantLimits
from agentos.mock.server import MockServer
from agentos.tenancy.principal import OPEN_PRINCIPAL
from agentos.testing import FakeClock, RunningServer
from agentos.testing.tenants import TenantKey, create_tenant_key
from tests.api.helpers import SSE, expect_error, new_session
from tests.api.structured_fields import policies

ServerFactory = Callable[..., Awaitable[RunningServer]]


def limits(**values: int) -> dict[str, Any]:
    return {f"tenant_limits.{name}": value for name, value in values.items()}


def rate_state(response: aiohttp.ClientResponse) -> tuple[dict[str, Any], dict[str, Any]]:
    return policies(response.headers["RateLimit-Policy"]), policies(response.headers["RateLimit"])


async def test_over_the_key_limit_is_a_429_that_says_when_to_retry(
    server_factory: ServerFactory, mock: MockServer, http: aiohttp.ClientSession
) -> None:
    clock = FakeClock()
    server = await server_factory(mock.url, clock=clock, **limits(key_requests_per_minute=3))
    remaining = []
    for _ in range(3):
        async with http.get(f"{server.url}/v1/sessions") as r:
            assert r.status == 200
            policy, state = rate_state(r)
            assert policy == {"key": {"q": 3, "w": 60}}
            remaining.append(state["key"]["r"])
            assert state["key"]["t"] == 20  # one more unit every 60 / 3 s
    assert remaining == [2, 1, 0]
    async with http.get(f"{server.url}/v1/sessions") as r:
        await expect_error(r, 429, "key_rate_limited")
        assert r.headers["Retry-After"] == "20"
        policy, state = rate_state(r)
        assert policy == {"key": {"q": 3, "w": 60}} and state == {"key": {"r": 0, "t": 20}}
    clock.advance(19.5)
    async with http.get(f"{server.url}/v1/sessions") as r:
        assert r.status == 429 and r.headers["Retry-After"] == "1"  # 0.5 s, rounded up
    clock.advance(0.5)
    async with http.get(f"{server.url}/v1/sessions") as r:
        assert r.status == 200


async def test_a_429_takes_nothing(
    server_factory: ServerFactory, mock: MockServer, http: aiohttp.ClientSession
) -> None:
    clock = FakeClock()
    server = await server_factory(mock.url, clock=clock, **limits(key_requests_per_minute=2))
    statuses = []
    for _ in range(8):
        async with http.get(f"{server.url}/v1/sessions") as r:
            statuses.append(r.status)
    assert statuses == [200, 200] + [429] * 6
    clock.advance(30)  # one unit back, however many refusals came before
    for expected in (200, 429):
        async with http.get(f"{server.url}/v1/sessions") as r:
            assert r.status == expected


async def test_the_tenant_limit_counts_every_key(
    server_factory: ServerFactory, mock: MockServer, http: aiohttp.ClientSession
) -> None:
    server = await server_factory(
        mock.url, clock=FakeClock(), **limits(key_requests_per_minute=100, requests_per_minute=2)
    )
    for _ in range(2):
        async with http.get(f"{server.url}/v1/sessions") as r:
            assert r.status == 200
    async with http.get(f"{server.url}/v1/sessions") as r:
        await expect_error(r, 429, "tenant_rate_limited")
        policy, state = rate_state(r)
        assert policy == {"key": {"q": 100, "w": 60}, "tenant": {"q": 2, "w": 60}}
        assert state["tenant"] == {"r": 0, "t": 30} and state["key"]["r"] == 98  # the 429 took none
        assert r.headers["Retry-After"] == "30"


async def test_two_keys_of_one_tenant_over_a_real_server(
    server_factory: ServerFactory, mock: MockServer, http: aiohttp.ClientSession
) -> None:
    """Each key has its own limit; the tenant's counts both; another tenant is untouched; and the
    tenant's row (set through the admin API) overrides the config's defaults."""
    clock = FakeClock()
    server = await server_factory(mock.url, clock=clock, **{"server.api_token": "admin"})
    row = {"key_requests_per_minute": 2, "requests_per_minute": 3}
    a = await create_tenant_key(server.url, "admin", tenant_id="acme", limits=row)
    b = await create_tenant_key(server.url, "admin", tenant_id="acme")
    other = await create_tenant_key(server.url, "admin", tenant_id="umbrella", limits=row)

    async def get(key: TenantKey) -> tuple[int, str | None]:
        async with http.get(f"{server.url}/v1/sessions", headers=key.headers) as r:
            return r.status, (await r.json())["error"]["code"] if r.status != 200 else None

    assert [await get(a), await get(a), await get(a)] == [(200, None), (200, None), (429, "key_rate_limited")]
    assert [await get(b), await get(b)] == [(200, None), (429, "tenant_rate_limited")]
    assert await get(other) == (200, None)
    async with http.get(f"{server.url}/v1/sessions", headers=b.headers) as r:
        assert policies(r.headers["RateLimit-Policy"]) == {"key": {"q": 2, "w": 60}, "tenant": {"q": 3, "w": 60}}
    clock.advance(20)  # one tenant unit back (60 / 3 s)
    assert await get(b) == (200, None)


def test_two_keys_of_one_tenant_have_their_own_limits_and_share_the_tenants() -> None:
    """Per key and per tenant at the limiter itself."""
    clock = FakeClock()
    limiters = Limiters(clock)
    tenant_limits = TenantLimits(key_requests_per_minute=2, requests_per_minute=3)
    a = replace(OPEN_PRINCIPAL, tenant_id="t", key_id="key_a", limits=tenant_limits)
    b = replace(a, key_id="key_b")
    other = replace(a, tenant_id="u", key_id="key_c")

    def code(who: Any) -> str | None:
        _, refused = limiters.check_request(who)
        return None if refused is None else str(refused.text)

    assert code(a) is None and code(a) is None
    assert "key_rate_limited" in str(code(a))  # a's own limit
    assert code(b) is None  # b has its own...
    assert "tenant_rate_limited" in str(code(b))  # ...but the tenant's third unit is gone
    assert code(other) is None  # another tenant is untouched


async def test_open_routes_are_never_limited(
    server_factory: ServerFactory, mock: MockServer, http: aiohttp.ClientSession
) -> None:
    overrides = limits(key_requests_per_minute=1, requests_per_minute=1)
    for token in ("", "secret"):
        server = await server_factory(mock.url, clock=FakeClock(), **overrides, **{"server.api_token": token})
        for path in ("/healthz", "/readyz", "/openapi.json", "/docs") * 3:
            async with http.get(f"{server.url}{path}") as r:
                assert r.status == 200, path
                assert "RateLimit" not in r.headers and "RateLimit-Policy" not in r.headers


async def test_no_limit_configured_means_no_headers(server: RunningServer, http: aiohttp.ClientSession) -> None:
    async with http.get(f"{server.url}/v1/sessions") as r:
        assert r.status == 200 and "RateLimit" not in r.headers


async def test_a_streamed_turn_carries_the_headers(
    server_factory: ServerFactory, mock: MockServer, http: aiohttp.ClientSession
) -> None:
    server = await server_factory(mock.url, clock=FakeClock(), **limits(key_requests_per_minute=10))
    sid = await new_session(http, server.url)
    async with http.post(f"{server.url}/v1/sessions/{sid}/turns", json={"input": "hi"}, headers=SSE) as r:
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/event-stream")
        assert rate_state(r)[1] == {"key": {"r": 8, "t": 6}}
        await r.read()


async def test_turns_per_minute(server_factory: ServerFactory, mock: MockServer, http: aiohttp.ClientSession) -> None:
    clock = FakeClock()
    server = await server_factory(mock.url, clock=clock, **limits(turns_per_minute=2))
    sid = await new_session(http, server.url)
    url = f"{server.url}/v1/sessions/{sid}/turns"
    for _ in range(2):
        async with http.post(url, json={"input": "hi"}) as r:
            assert r.status == 200 and (await r.json())["status"] == "completed"
    async with http.post(url, json={"input": "hi"}, headers=SSE) as r:
        await expect_error(r, 429, "turn_rate_limited")
        assert r.headers["Retry-After"] == "30"
    async with http.ws_connect(f"{server.url}/v1/sessions/{sid}/ws") as ws:  # the socket counts too
        await ws.send_json({"type": "turn", "input": "hi"})
        error = await ws.receive_json(timeout=10)
        assert error["type"] == "error" and error["error"]["code"] == "turn_rate_limited"
        assert error["error"]["retry_after_s"] == 30
        clock.advance(30)
        await ws.send_json({"type": "turn", "input": "hi"})
        assert (await ws.receive_json(timeout=10))["type"] == "turn.started"


async def test_a_turn_that_did_not_start_takes_nothing(
    server_factory: ServerFactory, mock: MockServer, http: aiohttp.ClientSession
) -> None:
    server = await server_factory(mock.url, clock=FakeClock(), **limits(turns_per_minute=1))
    for _ in range(3):
        async with http.post(f"{server.url}/v1/sessions/nope/turns", json={"input": "hi"}) as r:
            await expect_error(r, 404, "session_not_found")
    sid = await new_session(http, server.url)
    async with http.post(f"{server.url}/v1/sessions/{sid}/turns", json={"input": "hi"}) as r:
        assert r.status == 200


async def test_runs_per_minute(server_factory: ServerFactory, mock: MockServer, http: aiohttp.ClientSession) -> None:
    clock = FakeClock()
    server = await server_factory(mock.url, clock=clock, **limits(runs_per_minute=1))
    async with http.post(f"{server.url}/v1/agents", json={"name": "helper", "tools": []}) as r:
        assert r.status == 201, await r.text()
    for _ in range(3):  # a run that did not start takes nothing
        async with http.post(f"{server.url}/v1/agents/nobody/runs", json={"input": "go"}) as r:
            assert r.status == 404
    url = f"{server.url}/v1/agents/helper/runs"
    async with http.post(url, json={"input": "go"}) as r:
        assert r.status == 202
    async with http.post(url, json={"input": "go"}) as r:
        await expect_error(r, 429, "run_rate_limited")
        assert r.headers["Retry-After"] == "60"
    clock.advance(60)
    async with http.post(url, json={"input": "go"}) as r:
        assert r.status == 202


def test_the_document_describes_the_limits_on_every_limited_operation() -> None:
    from tests.api.helpers import OPENAPI

    error = {"$ref": "#/components/schemas/Error"}
    for path, item in OPENAPI["paths"].items():
        for method, operation in item.items():
            if method == "parameters" or operation.get("security") == []:
                continue
            responses = operation["responses"]
            # the OpenAI-compatible routes answer every error in OpenAI's shape (docs/openai.md)
            openai = path.startswith(("/v1/models", "/v1/chat/", "/v1/responses"))
            expected = {"$ref": "#/components/schemas/OpenAIError"} if openai else error
            assert responses["429"]["content"]["application/json"]["schema"] == expected, (method, path)
            assert {"Retry-After", "RateLimit", "RateLimit-Policy"} <= set(responses["429"]["headers"])
            for status, answer in responses.items():
                assert {"RateLimit", "RateLimit-Policy"} <= set(answer["headers"]), (method, path, status)
    quota = [("/v1/sessions", "post"), ("/v1/sessions/{session_id}/turns", "post"), ("/v1/agents/{name}/runs", "post")]
    for path, method in quota:
        assert OPENAPI["paths"][path][method]["responses"]["403"]["content"]["application/json"]["schema"] == error


async def test_the_default_tenants_row_limits_the_server_token(
    server_factory: ServerFactory, mock: MockServer, http: aiohttp.ClientSession
) -> None:
    server = await server_factory(mock.url, clock=FakeClock(), **{"server.api_token": "admin"})
    admin = {"Authorization": "Bearer admin"}
    body = {"limits": {"key_requests_per_minute": 2}}
    async with http.patch(f"{server.url}/v1/admin/tenants/default", json=body, headers=admin) as r:
        assert r.status == 200, await r.text()
    statuses = []
    for _ in range(3):
        async with http.get(f"{server.url}/v1/sessions", headers=admin) as r:
            statuses.append(r.status)
    assert statuses == [200, 200, 429]
