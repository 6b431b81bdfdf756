"""The front door obeys the native routes' rules: keys, scopes, tenants, admission, last-wins.

Through the official `openai` SDK where the SDK's own behaviour matters (which exception, how it
retries), raw HTTP where the headers do. Real server with real tenant keys, real mock provider.
The tests that need two tenants run again with two end users of one tenant (issue 30), signed
in by the loopback OIDC provider (`tests.identity.idp`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from agentos.config import settings_from_dict
from agentos.mock.server import MockServer
from agentos.testing import RunningServer, start_server
from agentos.testing.tenants import create_tenant_key
from tests.identity.idp import IdentityProvider, start_idp

ADMIN_TOKEN = "admin-token-for-the-tests"
USER_HI: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]
CHAT = "/v1/chat/completions"


@dataclass
class Keys:
    server: RunningServer
    a: str  # tenant A, every tenant scope
    b: str  # tenant B, every tenant scope
    a_read: str  # tenant A, read scopes only
    mode: str = "tenants"  # "users": a, b and a_read are alice's and bob's tokens, of tenant A

    def sdk(self, key: str) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=f"{self.server.url}/v1", api_key=key, max_retries=0)


@pytest.fixture(params=["tenants", "users"])
async def keys(request: pytest.FixtureRequest, tmp_path: Path, mock_factory) -> AsyncIterator[Keys]:
    mock: MockServer = await mock_factory()
    idp: IdentityProvider | None = await start_idp() if request.param == "users" else None
    data = {"data_dir": str(tmp_path / "data"), "provider": {"url": mock.url}, "server": {"api_token": ADMIN_TOKEN}}
    if idp is not None:
        issuer = {"tenant": "acme", "issuer": idp.issuer, "audience": idp.audience}
        data["identity"] = {"issuers": [issuer], "allow_loopback": True}
    server = await start_server(settings_from_dict(data))
    try:
        a = (await create_tenant_key(server.url, ADMIN_TOKEN, tenant_id="acme")).key
        b = (await create_tenant_key(server.url, ADMIN_TOKEN, tenant_id="bravo")).key
        read = ["sessions:read", "agents:read", "runs:read"]
        a_read = (await create_tenant_key(server.url, ADMIN_TOKEN, tenant_id="acme", scopes=read)).key
        if idp is not None:
            every = ["sessions:write", "agents:write", "runs:write", *read]
            a, b = (
                idp.mint({"sub": "alice", "scope": " ".join(every)}),
                idp.mint({"sub": "bob", "scope": " ".join(every)}),
            )
            a_read = idp.mint({"sub": "alice", "scope": " ".join(read)})
        yield Keys(server, a, b, a_read, request.param)
    finally:
        await server.close()
        if idp is not None:
            await idp.close()


async def test_keys_are_read_from_the_bearer_header(keys: Keys) -> None:
    async with keys.sdk("aos_not_a_key") as client:
        with pytest.raises(openai.AuthenticationError):
            await client.models.list()
    async with keys.sdk(keys.a_read) as client:
        assert [m.id async for m in client.models.list()] == ["mock-1"]
        with pytest.raises(openai.PermissionDeniedError):
            await client.chat.completions.create(model="mock-1", messages=USER_HI)


async def test_another_tenants_conversation_is_not_found(keys: Keys) -> None:
    async with keys.sdk(keys.a) as a, keys.sdk(keys.b) as b:
        await a.post("/agents", body={"name": "mine", "tools": []}, cast_to=object)
        plain = await a.chat.completions.with_raw_response.create(model="mock-1", messages=USER_HI)
        first = await a.responses.create(model="mock-1", input="one")
        if keys.mode == "tenants":  # agents are the tenant's: two users of one tenant share them
            assert [m.id async for m in b.models.list()] == ["mock-1"]  # not A's agent
            with pytest.raises(openai.NotFoundError) as agent:
                await b.chat.completions.create(model="mine", messages=USER_HI)
            assert agent.value.code == "model_not_found"
        with pytest.raises(openai.NotFoundError) as session:
            await b.chat.completions.create(
                model="mock-1", messages=USER_HI, extra_headers={"X-Session-Id": plain.headers["X-Session-Id"]}
            )
        with pytest.raises(openai.NotFoundError) as response:
            await b.responses.retrieve(first.id)
        with pytest.raises(openai.NotFoundError) as previous:
            await b.responses.create(model="mock-1", input="two", previous_response_id=first.id)
        assert (await a.responses.retrieve(first.id)).status == "completed"
        await a.responses.create(model="mock-1", input="two", previous_response_id=first.id)
        with pytest.raises(openai.NotFoundError) as older:  # not 409: nothing says it exists
            await b.responses.create(model="mock-1", input="three", previous_response_id=first.id)
    assert older.value.code == "previous_response_not_found"
    assert (session.value.code, response.value.code) == ("session_not_found", "response_not_found")
    assert previous.value.code == "previous_response_not_found"


async def test_branching_from_an_older_response_is_a_final_409(keys: Keys, http: aiohttp.ClientSession) -> None:
    async with keys.sdk(keys.a) as a:
        first = await a.responses.create(model="mock-1", input="one")
        await a.responses.create(model="mock-1", input="two", previous_response_id=first.id)
    body = {"model": "mock-1", "input": "three", "previous_response_id": first.id}
    auth = {"Authorization": f"Bearer {keys.a}"}
    async with http.post(f"{keys.server.url}/v1/responses", json=body, headers=auth) as r:
        assert r.status == 409 and r.headers["x-should-retry"] == "false"
        assert (await r.json())["error"]["code"] == "branching_not_supported"


async def test_a_full_server_answers_429_with_a_retry_after_the_sdks_honour(tmp_path: Path, mock_factory, http) -> None:
    mock: MockServer = await mock_factory(tokens=400, tps=100)  # a turn of seconds: it holds the gate
    overrides = {"kernel": {"max_in_flight_turns": 1, "retry_after_s": 300}}
    server = await start_server(
        settings_from_dict({"data_dir": str(tmp_path), "provider": {"url": mock.url}} | overrides)
    )
    body = {"model": "mock-1", "messages": USER_HI, "stream": True}
    try:
        async with http.post(f"{server.url}{CHAT}", json=body) as held:
            await held.content.readline()  # the role chunk: the turn is admitted and running
            async with http.post(f"{server.url}{CHAT}", json=body) as r:
                assert r.status == 429 and r.headers["Retry-After"] == "60"  # 300 is more than SDKs wait
                error = (await r.json())["error"]
        assert (error["type"], error["code"]) == ("rate_limit_error", "overloaded")
    finally:
        await server.close()


async def test_a_superseded_stream_ends_with_an_error_then_done(tmp_path: Path, mock_factory, http) -> None:
    mock: MockServer = await mock_factory(tokens=400, tps=100)
    server = await start_server(settings_from_dict({"data_dir": str(tmp_path), "provider": {"url": mock.url}}))
    body = {"model": "mock-1", "messages": USER_HI, "stream": True}
    try:
        async with http.post(f"{server.url}{CHAT}", json=body) as first:
            await first.content.readline()
            headers = {"X-Session-Id": first.headers["X-Session-Id"]}
            second = asyncio.create_task(_started(http, f"{server.url}{CHAT}", body, headers))
            lines = [line async for line in first.content if line.strip()]
        assert lines[-1] == b"data: [DONE]\n"
        assert b'"code":"superseded"' in lines[-2] and b'"type":"conflict_error"' in lines[-2]
        assert await second == 200
    finally:
        await server.close()


async def _started(http: aiohttp.ClientSession, url: str, body: object, headers: dict[str, str]) -> int:
    """The status of the superseding turn once its stream started (its role chunk came)."""
    async with http.post(url, json=body, headers=headers) as r:
        assert (await r.content.readline()).startswith(b"data: {")
        return r.status


async def test_a_refused_conversation_leaves_no_session(tmp_path: Path, mock_factory, http) -> None:
    """Refused after its session was made (the turn rate): the session goes, and its quota unit."""
    mock: MockServer = await mock_factory()
    limits = {"tenant_limits": {"turns_per_minute": 1, "max_sessions": 2}}
    server = await start_server(settings_from_dict({"data_dir": str(tmp_path), "provider": {"url": mock.url}} | limits))
    body = {"model": "mock-1", "messages": USER_HI}
    try:
        async with http.post(f"{server.url}{CHAT}", json=body) as r:
            assert r.status == 200
        for _ in range(3):  # more than max_sessions: no refusal may hold a session
            async with http.post(f"{server.url}{CHAT}", json=body) as r:
                assert r.status == 429 and (await r.json())["error"]["code"] == "turn_rate_limited"
        async with http.get(f"{server.url}/v1/sessions") as r:
            assert len((await r.json())["data"]) == 1
    finally:
        await server.close()
