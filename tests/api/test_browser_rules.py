"""The browser rules on the real open loopback server (no key: every request would be the
admin's): each request is sent as a browser sends it, and a refused one changes nothing.
`agentos.api.browser`, `agentos.api.body.read_body`, docs/security.md "Browser rules"."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from agentos.api.browser import BrowserRules
from agentos.config import load_settings
from agentos.errors import ConfigError
from agentos.journal.store import SqliteJournalStore
from agentos.mock.server import MockServer
from agentos.testing import RunningServer
from tests.api.helpers import expect_error
from tests.triggers.webhooks import Sender, create_trigger

Factory = Callable[..., Awaitable[RunningServer]]
EVIL = "http://evil.example"
TEXT = {"Content-Type": "text/plain"}
FORM = {"Content-Type": "application/x-www-form-urlencoded"}
JSON = {"Content-Type": "application/json"}


async def _agent_names(http: aiohttp.ClientSession, url: str) -> list[str]:
    async with http.get(f"{url}/v1/agents") as r:
        assert r.status == 200, await r.text()
        return [a["name"] for a in (await r.json())["data"]]


async def _run_count(server: RunningServer) -> int:
    store = server.services.runs.store
    assert isinstance(store, SqliteJournalStore)
    count: int = await store.runs.read(lambda db: db.execute("SELECT count(*) FROM runs").fetchone()[0])
    return count


async def _create_agent(http: aiohttp.ClientSession, url: str, name: str, headers: dict[str, str]) -> dict[str, Any]:
    async with http.post(f"{url}/v1/agents", data=f'{{"name": "{name}"}}'.encode(), headers=headers) as r:
        if r.status == 201:
            return {"status": 201}
        return {"status": r.status, "body": await expect_error(r, r.status)}


async def test_a_simple_cross_site_post_is_refused_and_creates_nothing(
    server: RunningServer, http: aiohttp.ClientSession
) -> None:
    url = server.url
    async with http.post(f"{url}/v1/agents", data=b'{"name": "x"}', headers={"Origin": EVIL, **TEXT}) as r:
        await expect_error(r, 403, "cross_origin")
    async with http.post(f"{url}/v1/agents", json={"name": "x"}, headers={"Origin": EVIL}) as r:
        await expect_error(r, 403, "cross_origin")  # a JSON body does not make it same-origin
    assert await _agent_names(http, url) == []
    async with http.post(f"{url}/v1/agents", json={"name": "ops"}) as r:
        assert r.status == 201, await r.text()
    run = {"Origin": EVIL, **TEXT}
    async with http.post(f"{url}/v1/agents/ops/runs", data=b'{"input": "rm -rf"}', headers=run) as r:
        await expect_error(r, 403, "cross_origin")
    assert await _run_count(server) == 0
    async with http.post(f"{url}/v1/agents", json={"name": "y"}, headers={"Origin": "null"}) as r:
        await expect_error(r, 403, "cross_origin")  # a sandboxed frame, a file:// page
    assert await _agent_names(http, url) == ["ops"]


async def test_a_page_of_the_server_itself_may_call_it(server: RunningServer, http: aiohttp.ClientSession) -> None:
    url = server.url
    port = url.rsplit(":", 1)[1]
    async with http.post(f"{url}/v1/agents", json={"name": "a"}, headers={"Origin": url}) as r:
        assert r.status == 201, await r.text()
    same = {"Origin": f"http://localhost:{port}", "Host": f"localhost:{port}", "Sec-Fetch-Site": "same-origin"}
    async with http.post(f"{url}/v1/agents", json={"name": "b"}, headers=same) as r:
        assert r.status == 201, await r.text()
    other_port = {"Origin": f"http://127.0.0.1:{int(port) + 1}"}  # another local app: another origin
    async with http.post(f"{url}/v1/agents", json={"name": "c"}, headers=other_port) as r:
        await expect_error(r, 403, "cross_origin")
    assert await _agent_names(http, url) == ["a", "b"]


async def test_sec_fetch_site_without_origin_refuses_a_cross_site_read(
    server: RunningServer, http: aiohttp.ClientSession
) -> None:
    url = server.url
    for site in ("cross-site", "same-site"):
        async with http.get(f"{url}/v1/sessions", headers={"Sec-Fetch-Site": site}) as r:
            await expect_error(r, 403, "cross_origin")
    for site in ("same-origin", "none"):  # a page of ours; the address bar
        async with http.get(f"{url}/v1/sessions", headers={"Sec-Fetch-Site": site}) as r:
            assert r.status == 200, await r.text()
    # the probes and the API's description are readable from anywhere: they tell a page nothing
    for path in ("/healthz", "/openapi.json", "/docs"):
        async with http.get(f"{url}{path}", headers={"Origin": EVIL, "Sec-Fetch-Site": "cross-site"}) as r:
            assert r.status == 200, path


async def test_a_websocket_from_another_site_is_refused(server: RunningServer, http: aiohttp.ClientSession) -> None:
    async with http.post(f"{server.url}/v1/sessions", json={}) as r:
        session_id = (await r.json())["id"]
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        async with http.ws_connect(f"{server.url}/v1/sessions/{session_id}/ws", origin=EVIL):
            pass
    assert refused.value.status == 403
    async with http.ws_connect(f"{server.url}/v1/sessions/{session_id}/ws", origin=server.url) as ws:
        assert not ws.closed


async def test_an_allowed_origin_from_the_config_may_call_it(
    server_factory: Factory, mock: MockServer, http: aiohttp.ClientSession
) -> None:
    allowed = {"server.allowed_origins": ["https://App.Example/"]}  # written loosely: compared as browsers write it
    url = (await server_factory(mock.url, **allowed)).url
    async with http.post(f"{url}/v1/agents", json={"name": "a"}, headers={"Origin": "https://app.example"}) as r:
        assert r.status == 201, await r.text()
    async with http.post(f"{url}/v1/agents", json={"name": "b"}, headers={"Origin": "http://app.example"}) as r:
        await expect_error(r, 403, "cross_origin")  # another scheme is another origin
    assert await _agent_names(http, url) == ["a"]


async def test_a_json_route_refuses_a_body_not_declared_json(
    server: RunningServer, http: aiohttp.ClientSession
) -> None:
    for headers in (
        TEXT,
        FORM,
        {"Content-Type": "multipart/form-data; boundary=b"},
        {"Content-Type": "application/jsonx"},
        {"Content-Type": ""},
        {},  # aiohttp labels bytes application/octet-stream
    ):
        answer = await _create_agent(http, server.url, "x", headers)
        assert answer["status"] == 415 and answer["body"]["error"]["code"] == "unsupported_media_type", headers
    assert await _agent_names(http, server.url) == []


async def test_json_in_any_spelling_is_taken_and_an_empty_body_needs_no_type(
    server: RunningServer, http: aiohttp.ClientSession
) -> None:
    url = server.url
    for i, kind in enumerate(("application/json; charset=utf-8", "Application/JSON", "application/vnd.x+json")):
        assert (await _create_agent(http, url, f"a{i}", {"Content-Type": kind}))["status"] == 201
    async with http.post(f"{url}/v1/sessions") as r:  # no body: whatever its Content-Type, an empty session body
        assert r.status == 201, await r.text()

    async def chunked() -> AsyncIterator[bytes]:
        yield b'{"metadata": {}}'

    async with http.post(f"{url}/v1/sessions", data=chunked(), headers=TEXT) as r:  # no Content-Length
        await expect_error(r, 415, "unsupported_media_type")
    async with http.post(f"{url}/v1/agents/a0/runs", json={"input": "hi"}) as r:
        assert r.status == 202, await r.text()
        run_id = (await r.json())["run_id"]
    async with http.post(f"{url}/v1/runs/{run_id}/cancel") as r:  # a route without a body
        assert r.status in (200, 202, 409), await r.text()


async def test_a_host_that_is_not_the_servers_is_refused(server: RunningServer, http: aiohttp.ClientSession) -> None:
    url = server.url
    port = url.rsplit(":", 1)[1]
    for host in (f"evil.example:{port}", "evil.example", f"localhost.evil.example:{port}"):
        async with http.post(f"{url}/v1/agents", json={"name": "x"}, headers={"Host": host}) as r:
            await expect_error(r, 421, "host_not_allowed")
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", "LOCALHOST"):
        async with http.get(f"{url}/v1/agents", headers={"Host": host}) as r:
            assert r.status == 200, (host, await r.text())
    async with http.get(f"{url}/healthz", headers={"Host": "10.1.2.3:8080"}) as r:
        assert r.status == 200  # a balancer's probe names the node's address
    assert await _agent_names(http, url) == []


async def test_allowed_hosts_from_the_config(
    server_factory: Factory, mock: MockServer, http: aiohttp.ClientSession
) -> None:
    url = (await server_factory(mock.url, **{"server.allowed_hosts": ["agents.example"]})).url
    async with http.get(f"{url}/v1/agents", headers={"Host": "agents.example:443"}) as r:
        assert r.status == 200, await r.text()
    async with http.get(f"{url}/v1/agents", headers={"Host": "other.example"}) as r:
        await expect_error(r, 421, "host_not_allowed")


async def test_a_signed_delivery_passes_whatever_its_headers(
    server: RunningServer, http: aiohttp.ClientSession
) -> None:
    async with http.post(f"{server.url}/v1/agents", json={"name": "echo", "tools": []}) as r:
        assert r.status == 201, await r.text()
    created = await create_trigger(http, server.url, agent="echo")
    sender = Sender(http, server.url, created["trigger_id"], created["secret"])
    odd = {"Origin": EVIL, "Host": "hooks.example", "Content-Type": "text/plain", "Sec-Fetch-Site": "cross-site"}
    answer = await sender.send({"n": 1}, headers=odd)
    assert answer.status == 202, answer.body
    unsigned = {"Origin": EVIL, **TEXT}
    async with http.post(f"{server.url}/v1/triggers/{created['trigger_id']}/events", data=b"{}", headers=unsigned) as r:
        await expect_error(r, 401)  # the exemption opens nothing: the signature still decides


def test_the_rules_from_the_settings() -> None:
    def rules(**server: Any) -> BrowserRules:
        return BrowserRules.from_settings(load_settings(None, environ={}, overrides=server).server)

    assert rules().hosts == frozenset({"localhost", "127.0.0.1", "::1"})
    assert rules(**{"server.host": "127.0.0.2"}).hosts == frozenset({"localhost", "127.0.0.1", "::1", "127.0.0.2"})
    assert rules(**{"server.host": "0.0.0.0"}).hosts is None  # beyond loopback the keys guard it
    assert rules(**{"server.host": "0.0.0.0", "server.allowed_hosts": ["a.example"]}).hosts == frozenset(
        {
            "localhost",
            "127.0.0.1",
            "::1",
            "0.0.0.0",
            "a.example",
        }
    )
    assert rules(**{"server.allowed_hosts": ["*"]}).hosts is None
    loaded = load_settings(None, environ={"AGENTOS_SERVER_ALLOWED_ORIGINS": "https://a.example, http://b.example:3000"})
    assert loaded.server.allowed_origins == ["https://a.example", "http://b.example:3000"]


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("AGENTOS_SERVER_ALLOWED_ORIGINS", "null"),
        ("AGENTOS_SERVER_ALLOWED_ORIGINS", "*"),
        ("AGENTOS_SERVER_ALLOWED_ORIGINS", "https://a.example/app"),
        ("AGENTOS_SERVER_ALLOWED_ORIGINS", "a.example"),
        ("AGENTOS_SERVER_ALLOWED_HOSTS", "a.example:8080"),
        ("AGENTOS_SERVER_ALLOWED_HOSTS", "http://a.example"),
    ],
)
def test_a_bad_entry_stops_start_up_naming_it(key: str, value: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings(None, environ={key: value})
    setting = key.removeprefix("AGENTOS_").lower().replace("server_", "server.", 1)
    assert setting in str(refused.value) and repr(value) in str(refused.value)
