"""Absolute-form request targets (`GET http://evil.example/v1/sessions HTTP/1.1`) on the real
open loopback server, sent as raw bytes: a target naming a host that is not this server's gets
the 421 of a bad `Host` and changes nothing; one naming the server itself is served whatever
its `Host` says (RFC 9112 3.2.2: the server ignores `Host` then); a target that is no http(s)
URL, or holds userinfo, is a 400. `agentos.api.browser`, docs/security.md "Browser rules"."""

from __future__ import annotations

import aiohttp
import msgspec

from agentos.mock.server import MockServer
from agentos.testing import RunningServer
from tests.api.test_browser_rules import Factory
from tests.api.test_hostile_requests import assert_json_error, raw_request


def request(method: str, target: str, host: str, *headers: str, body: bytes = b"") -> bytes:
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}", "Connection: close", *headers]
    if body:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def _agents(http: aiohttp.ClientSession, url: str) -> list[str]:
    async with http.get(f"{url}/v1/agents") as r:
        assert r.status == 200, await r.text()
        return [a["name"] for a in (await r.json())["data"]]


async def test_a_target_naming_another_host_is_a_421_and_changes_nothing(
    server: RunningServer, http: aiohttp.ClientSession
) -> None:
    own = server.url.removeprefix("http://")
    port = own.rsplit(":", 1)[1]
    for target in (
        "http://evil.example/v1/sessions",
        f"http://evil.example:{port}/v1/sessions",
        "https://evil.example/v1/sessions",
    ):
        status, headers, body = await raw_request(server.url, request("GET", target, own))
        assert_json_error(status, headers, body, 421, "host_not_allowed")
        assert "evil.example" in msgspec.json.decode(body)["error"]["message"]
    create = request("POST", "http://evil.example/v1/agents", own, body=b'{"name": "x"}')
    assert_json_error(*await raw_request(server.url, create), 421, "host_not_allowed")
    assert await _agents(http, server.url) == []


async def test_a_target_naming_the_server_is_served_whatever_its_host_header(
    server: RunningServer, http: aiohttp.ClientSession
) -> None:
    own = server.url.removeprefix("http://")
    port = own.rsplit(":", 1)[1]
    for target in (
        f"http://{own}/v1/sessions",
        f"http://localhost:{port}/v1/sessions",
        f"http://[::1]:{port}/v1/sessions",
    ):
        status, _, body = await raw_request(server.url, request("GET", target, "evil.example"))
        assert status == 200, (target, body[:300])
        assert "data" in msgspec.json.decode(body)
    create = request("POST", f"http://{own}/v1/agents", "evil.example", body=b'{"name": "ok"}')
    status, _, body = await raw_request(server.url, create)
    assert status == 201, body[:300]
    assert await _agents(http, server.url) == ["ok"]


async def test_the_origin_is_compared_with_the_targets_host_not_the_header(
    server: RunningServer, http: aiohttp.ClientSession
) -> None:
    """`Host: evil.example` with `Origin: http://evil.example` is same-origin by the header; the
    target names the server, so the page's origin is foreign."""
    own = server.url.removeprefix("http://")
    target = f"http://{own}/v1/agents"
    sent = request("POST", target, "evil.example", "Origin: http://evil.example", body=b'{"name": "x"}')
    assert_json_error(*await raw_request(server.url, sent), 403, "cross_origin")
    sent = request("POST", target, "evil.example", f"Origin: http://{own}", body=b'{"name": "y"}')
    status, _, body = await raw_request(server.url, sent)
    assert status == 201, body[:300]
    assert await _agents(http, server.url) == ["y"]


async def test_a_target_that_is_no_http_url_or_holds_userinfo_is_a_400(server: RunningServer) -> None:
    own = server.url.removeprefix("http://")
    for target in (f"ftp://{own}/v1/sessions", f"foo://{own}/v1/sessions", f"http://user@{own}/v1/sessions"):
        status, headers, body = await raw_request(server.url, request("GET", target, own))
        assert_json_error(status, headers, body, 400, "bad_request")


async def test_the_probes_are_exempt_as_from_the_host_rule(server: RunningServer) -> None:
    status, _, body = await raw_request(server.url, request("GET", "http://evil.example/healthz", "evil.example"))
    assert status == 200, body[:300]


async def test_allowed_hosts_apply_to_the_target(server_factory: Factory, mock: MockServer) -> None:
    server = await server_factory(mock.url, **{"server.allowed_hosts": ["agents.example"]})
    own = server.url.removeprefix("http://")
    status, _, body = await raw_request(server.url, request("GET", "http://agents.example/v1/sessions", "evil.example"))
    assert status == 200, body[:300]
    sent = request("GET", "http://evil.example/v1/sessions", "agents.example")
    assert_json_error(*await raw_request(server.url, sent), 421, "host_not_allowed")
    status, _, body = await raw_request(server.url, request("GET", "/v1/sessions", own))  # origin-form as before
    assert status == 200, body[:300]


async def test_spellings_that_hide_another_host_are_refused(server: RunningServer) -> None:
    """Each tries to make a check read one host and a client another; none is served."""
    own = server.url.removeprefix("http://")
    refused = {
        "http://127.0.0.1@evil.example/v1/sessions": 400,  # userinfo: the host is evil.example
        f"http://evil.example\\@{own}/v1/sessions": 400,  # WHATWG reads a backslash as a slash
        "http://evil.example#@127.0.0.1/v1/sessions": 400,
        "http:/evil.example/v1/sessions": 400,
        "http:///v1/sessions": 400,
        "http://ev%69l.example/v1/sessions": 421,
        "http://0x7f.1/v1/sessions": 421,  # 127.0.0.1 to some resolvers; not a name of the server
    }
    for target, expected in refused.items():
        status, headers, body = await raw_request(server.url, request("GET", target, own))
        assert_json_error(status, headers, body, expected, "bad_request" if expected == 400 else "host_not_allowed")
    for target in ("http://127.0.0.1./v1/sessions", "HTTP://LOCALHOST/v1/sessions"):  # the same names
        status, _, body = await raw_request(server.url, request("GET", target, "evil.example"))
        assert status == 200, (target, body[:300])
