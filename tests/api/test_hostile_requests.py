"""Hostile requests (issue 14): each gets a 4xx with a JSON error body, never a 500 and never a
held connection: JSON nested deep or holding NUL, bytes that are not UTF-8 in headers, integers
past 64 bits, NUL in URLs. Content-Encodings that lie or bomb are in test_hostile_encodings.py,
streams that fail after they have started in test_hostile_streams.py."""

from __future__ import annotations

import asyncio
import gzip
import time
from typing import Any

import aiohttp
import msgspec
import pytest

from agentos.api.middleware import OPEN_ROUTES
from agentos.json_limits import MAX_JSON_DEPTH
from agentos.mock.server import MockServer
from agentos.testing import RunningServer
from agentos.triggers.signatures import decode_secret, sign
from tests.api.helpers import expect_error, new_session
from tests.knowledge.http import create_collection
from tests.triggers.webhooks import Sender, create_trigger, serve

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
JSON = {"Content-Type": "application/json"}


def nested(depth: int, kind: str) -> bytes:
    """A JSON value `depth` levels deep: `[[...]]` or `{"a":{"a":...1}}`."""
    if kind == "array":
        return b"[" * depth + b"]" * depth
    return b'{"a":' * depth + b"1" + b"}" * depth


async def raw_request(url: str, request: bytes, timeout_s: float = 5.0) -> tuple[int, dict[str, str], bytes]:
    """Send `request` as bytes over a new connection; the status, headers and body that come back."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(request)
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), timeout_s)  # Connection: close: read to the end
    finally:
        writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    return int(status_line.split()[1]), headers, body


def get(path: str, *headers: bytes) -> bytes:
    return (
        b"GET "
        + path.encode()
        + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        + b"".join(h + b"\r\n" for h in headers)
        + b"\r\n"
    )


def post(path: str, body: bytes, *headers: bytes) -> bytes:
    """A raw POST; declared JSON unless `headers` name a Content-Type of their own."""
    if not any(h.lower().startswith(b"content-type:") for h in headers):
        headers = (b"Content-Type: application/json", *headers)
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: {len(body)}\r\n".encode()
    return head + b"".join(h + b"\r\n" for h in headers) + b"\r\n" + body


def assert_json_error(
    status: int, headers: dict[str, str], body: bytes, expected: int, code: str | None = None
) -> None:
    assert status == expected, (status, body[:300])
    assert headers["content-type"].startswith("application/json"), headers
    error = msgspec.json.decode(body)["error"]
    assert error["message"] and (code is None or error["code"] == code), error


@pytest.fixture
async def docs(server: RunningServer, http: aiohttp.ClientSession) -> RunningServer:
    await create_collection(http, server.url)
    return server


async def json_routes(http: aiohttp.ClientSession, url: str) -> list[tuple[str, str, bytes, bytes]]:
    """(method, path, before, after): every route with a JSON body; the body is before + value + after."""
    sid = await new_session(http, url)
    return [
        ("POST", "/v1/sessions", b'{"metadata":', b"}"),
        ("POST", f"/v1/sessions/{sid}/turns", b'{"input":', b"}"),
        ("POST", "/v1/agents", b'{"name":"deep","tools":', b"}"),
        ("POST", "/v1/agents/deep/runs", b'{"input":', b"}"),
        ("POST", "/v1/runs/run_x/answer", b'{"operation_id":', b"}"),
        ("POST", "/v1/collections", b'{"name":"c","embedding_model":"m","dimensions":8,"x":', b"}"),
        ("POST", "/v1/collections/docs/documents", b'{"content":"x","content_type":"text/plain","metadata":', b"}"),
        ("POST", "/v1/collections/docs/query", b'{"query":"q","filter":', b"}"),
        ("POST", "/v1/triggers", b'{"agent":"a","description":', b"}"),
        ("POST", "/v1/schedules", b'{"agent":"a","every_s":60,"input":', b"}"),
        ("POST", "/v1/admin/tenants", b'{"tenant_id":"t","limits":', b"}"),
        ("POST", "/v1/admin/keys", b'{"tenant_id":"t","scopes":', b"}"),
        ("PATCH", "/v1/admin/tenants/default", b'{"limits":', b"}"),
    ]


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH, 1000, 100_000])
async def test_json_nested_past_the_bound_is_a_400_on_every_json_route(
    docs: RunningServer, http: aiohttp.ClientSession, depth: int
) -> None:
    for method, path, before, after in await json_routes(http, docs.url):
        for kind in ("array", "object"):
            body = before + nested(depth, kind) + after  # one level more than `depth` in all
            async with http.request(method, docs.url + path, data=body, headers=JSON) as r:
                await expect_error(r, 400, "malformed_json")


async def test_json_at_the_bound_is_taken(server: RunningServer, http: aiohttp.ClientSession) -> None:
    body = b'{"metadata":' + nested(MAX_JSON_DEPTH - 1, "object") + b"}"
    async with http.post(f"{server.url}/v1/sessions", data=body, headers=JSON) as r:
        assert r.status == 201, await r.text()


async def test_nul_in_a_json_string_is_a_422_on_every_json_route(
    docs: RunningServer, http: aiohttp.ClientSession
) -> None:
    """PostgreSQL takes NUL in no text and no jsonb: refused alike on every backend."""
    for method, path, before, after in await json_routes(http, docs.url):
        for value in (b'"a\\u0000b"', b'{"k\\u0000": 1}'):
            async with http.request(method, docs.url + path, data=before + value + after, headers=JSON) as r:
                await expect_error(r, 422, "invalid_input")
    sid = await new_session(http, docs.url)  # an escaped backslash before u0000 is no NUL
    async with http.post(f"{docs.url}/v1/sessions/{sid}/turns", data=b'{"input": "a\\\\u0000"}', headers=JSON) as r:
        assert r.status == 200, await r.text()


async def test_websocket_frames_too_deep_or_with_nul_are_error_frames(
    server: RunningServer, http: aiohttp.ClientSession
) -> None:
    sid = await new_session(http, server.url)
    async with http.ws_connect(f"{server.url}/v1/sessions/{sid}/ws") as ws:
        for frame, code in [
            (nested(100_000, "array").decode(), "malformed_json"),
            ('{"type": "turn", "input": ' + nested(1000, "object").decode() + "}", "malformed_json"),
            ('{"type": "turn", "input": "a\\u0000"}', "invalid_input"),
        ]:
            await ws.send_str(frame)
            answer = await ws.receive_json(timeout=5)
            assert answer["type"] == "error" and answer["error"]["code"] == code, answer
        await ws.send_str('{"type": "cancel"}')  # the socket is still open and answering
        await ws.send_str("[")
        assert (await ws.receive_json(timeout=5))["error"]["code"] == "malformed_json"


async def test_a_trigger_delivery_too_deep_or_with_nul_is_refused(
    tmp_path: Any, mock: MockServer, http: aiohttp.ClientSession
) -> None:
    server = await serve(tmp_path / "data", mock, {})
    try:
        created = await create_trigger(http, server.url, input_template="{payload.a}")
        sender = Sender(http, server.url, created["trigger_id"], created["secret"])
        for raw, status, code in [
            (nested(MAX_JSON_DEPTH + 1, "object"), 400, "malformed_json"),
            (nested(900, "object"), 400, "malformed_json"),  # decoded by msgspec, past our bound
            (nested(50_000, "array"), 400, "malformed_json"),
            (b'{"a": "x\\u0000"}', 422, "invalid_input"),
        ]:
            answer = await sender.send(raw=raw)
            assert (answer.status, answer.body["error"]["code"]) == (status, code), answer
        # a gzipped delivery is verified as decoded: signed over the JSON, sent compressed
        body = b'{"a": "zipped"}'
        sent = {"webhook-id": "msg_gz", "webhook-timestamp": str(int(time.time())), "Content-Encoding": "gzip"}
        sent["webhook-signature"] = sign(
            decode_secret(created["secret"]), "msg_gz", int(sent["webhook-timestamp"]), body
        )
        events = f"{server.url}/v1/triggers/{created['trigger_id']}/events"
        async with http.post(events, data=gzip.compress(body), headers=sent) as r:
            assert r.status == 202, await r.text()
        async with http.post(events, data=b"not gzip", headers=sent) as r:
            await expect_error(r, 400, "malformed_body")
        # bytes that are not UTF-8 in the Standard Webhooks headers, over a raw socket
        ts = str(int(time.time())).encode()
        bad_id = "\udcff\udcfe"  # how aiohttp hands over b"\xff\xfe" (surrogateescape)
        good_sig = sign(decode_secret(created["secret"]), bad_id, int(ts), body).encode()
        path = f"/v1/triggers/{created['trigger_id']}/events"
        cases: list[tuple[tuple[bytes, ...], int, str | None]] = [
            (
                (b"webhook-id: \xff\xfe", b"webhook-timestamp: " + ts, b"webhook-signature: " + good_sig),
                400,
                "invalid_webhook_id",
            ),
            (
                (b"webhook-id: m1", b"webhook-timestamp: " + ts, b"webhook-signature: v1,\xff\xfe"),
                401,
                "invalid_signature",
            ),
            ((b"webhook-id: m1", b"webhook-timestamp: \xff", b"webhook-signature: " + good_sig), 401, None),
        ]
        for headers, expected, want in cases:
            status, got, raw = await raw_request(
                server.url, post(path, body, b"Content-Type: application/json", *headers)
            )
            assert_json_error(status, got, raw, expected, want)
    finally:
        await server.close()


async def test_bytes_that_are_not_utf8_in_authorization_are_401_on_every_route(
    server_factory: Any, mock: MockServer
) -> None:
    """aiohttp keeps undecodable header bytes as lone surrogates: they reach the token compare and
    the key registry. Every keyed route answers 401 JSON, for junk, a key-like prefix, and the
    token with a bad byte after it."""
    server: RunningServer = await server_factory(mock.url, **{"server.api_token": TOKEN})
    paths = set()
    for resource in server.app.router.resources():
        path = resource.canonical
        if path in OPEN_ROUTES:  # the probes, the documents and pages, the signed deliveries
            continue
        paths.add(path.replace("{", "x").replace("}", ""))
    assert len(paths) > 20
    for path in sorted(paths):
        for auth in (
            b"Bearer \xff\xfe",
            b"Bearer aos_\xff\xfe\xfd",
            b"Bearer aos_k1_\xff",
            TOKEN.encode() + b"\xff",
            b"\xff\xfe x",
        ):
            status, headers, body = await raw_request(server.url, get(path, b"Authorization: " + auth))
            assert_json_error(status, headers, body, 401, "unauthorized")


async def test_bytes_that_are_not_utf8_in_other_headers_are_4xx(
    server_factory: Any, mock: MockServer, http: aiohttp.ClientSession
) -> None:
    server: RunningServer = await server_factory(mock.url, **{"server.api_token": TOKEN})
    http.headers.update(AUTH)
    await create_collection(http, server.url)
    sid = await new_session(http, server.url)
    async with http.post(f"{server.url}/v1/sessions/{sid}/turns", json={"input": "hi"}) as r:
        turn_id = (await r.json())["turn_id"]
    auth = b"Authorization: Bearer " + TOKEN.encode()
    for path in (f"/v1/sessions/{sid}/turns/{turn_id}/events", "/v1/runs/run_x/events"):
        for value in (b"\xff\xfe", turn_id.encode() + b":\xff"):
            status, headers, body = await raw_request(server.url, get(path, auth, b"Last-Event-ID: " + value))
            assert_json_error(status, headers, body, 400, "bad_request")
    upload = "/v1/collections/docs/documents"
    for header, expected in [
        (b"Agentos-Title: \xff\xfe", 400),
        (b'Agentos-Metadata: {"a": "\xff"}', 400),
        (b"Agentos-Metadata: " + b"[" * 8000, 400),
        (b"Agentos-Metadata: " + nested(1000, "object"), 400),
        (b"Idempotency-Key: \xff\xfe", 400),  # not UTF-8, as any header: 400 (before its own check)
    ]:
        request = post(upload, b"some text", auth, b"Content-Type: text/plain", header)
        status, headers, body = await raw_request(server.url, request)
        assert_json_error(status, headers, body, expected)
    status, headers, body = await raw_request(server.url, get("/v1/sessions", auth, b"Origin: http://\xff"))
    assert status < 500


BIG = [str(2**63), str(2**64), "-1", "abc", "9" * 1000, "9" * 5000, "1_0", "%2B5", "1e3", "0x10", "%00", "%FF"]


async def test_an_event_cursor_past_64_bits_or_not_a_number_is_a_400_before_the_stream(
    server: RunningServer, http: aiohttp.ClientSession
) -> None:
    sid = await new_session(http, server.url)
    async with http.post(f"{server.url}/v1/sessions/{sid}/turns", json={"input": "hi"}) as r:
        turn_id = (await r.json())["turn_id"]
    async with http.post(f"{server.url}/v1/agents", json={"name": "a", "tools": []}) as r:
        assert r.status == 201
    async with http.post(f"{server.url}/v1/agents/a/runs", json={"input": "x"}) as r:
        run_id = (await r.json())["run_id"]
    streams = [f"/v1/runs/{run_id}/events", f"/v1/sessions/{sid}/turns/{turn_id}/events"]
    for path in streams:
        for value in BIG:
            status, headers, body = await raw_request(server.url, get(f"{path}?after={value}"))
            assert_json_error(status, headers, body, 400)
            if "%" not in value:
                status, headers, body = await raw_request(server.url, get(path, f"Last-Event-ID: {value}".encode()))
                assert_json_error(status, headers, body, 400)


async def test_integer_query_parameters_past_64_bits_are_a_422(
    server: RunningServer, http: aiohttp.ClientSession
) -> None:
    sid = await new_session(http, server.url)
    created = await create_collection(http, server.url)
    assert created
    async with http.post(f"{server.url}/v1/agents", json={"name": "a", "tools": []}) as r:
        assert r.status == 201
    async with http.post(f"{server.url}/v1/triggers", json={"agent": "a"}) as r:
        trigger_id = (await r.json())["trigger_id"]
    lists = ["/v1/sessions", "/v1/agents", "/v1/admin/tenants", "/v1/admin/keys", "/v1/collections/docs/documents"]
    lists += ["/v1/triggers", f"/v1/triggers/{trigger_id}/deliveries", "/v1/schedules"]
    cursors = [
        f"/v1/sessions/{sid}/messages?after=",
        f"/v1/sessions/{sid}/events?after=",
        f"/v1/triggers/{trigger_id}/deliveries?before=",
    ]
    for value in [*BIG, "1e309", "NaN", ""]:
        for path in [f"{p}?limit={value}" for p in lists] + [c + value for c in cursors]:
            status, headers, body = await raw_request(server.url, get(path))
            assert_json_error(status, headers, body, 422, "invalid_input")


async def test_nul_in_a_url_is_a_404_in_the_path_and_a_422_in_a_query_parameter(any_store: RunningServer) -> None:
    """On PostgreSQL an id or cursor with NUL failed the query (a 500): refused before any handler."""
    server = any_store
    paths = ["/v2/nothing%00"]
    for resource in server.app.router.resources():
        if "{" in resource.canonical:
            paths.append(resource.canonical.replace("{", "a%00").replace("}", ""))
    assert len(paths) > 25
    for path in paths:
        status, headers, body = await raw_request(server.url, get(path))
        assert_json_error(status, headers, body, 404, "not_found")
    queries = ["/v1/sessions?after=a%00b", "/v1/collections/docs/documents?after=%00", "/v1/agents?after=%00"]
    queries += ["/v1/triggers?after=%00", "/v1/admin/tenants?after=%00", "/v1/admin/keys?tenant_id=%00"]
    queries += ["/v1/schedules?after=%00"]
    for target in queries:
        status, headers, body = await raw_request(server.url, get(target))
        assert_json_error(status, headers, body, 422, "invalid_input")
