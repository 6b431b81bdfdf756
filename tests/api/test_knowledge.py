"""The knowledge routes' edges over HTTP: sizes, types, malformed and hostile bodies (each a
4xx with a JSON error, never a 500), pagination, and answers that match the OpenAPI document."""

from __future__ import annotations

import base64
import io
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from multidict import CIMultiDict

from agentos.testing import RunningServer
from tests.api.helpers import assert_documented, expect_error
from tests.knowledge.http import create_collection, pdf_with_text, ready, upload

MB = 1 << 20


@pytest.fixture
async def docs(server: RunningServer, http: aiohttp.ClientSession) -> str:
    """The server's URL, with a collection `docs`."""
    assert_documented(await create_collection(http, server.url), "Collection")
    return server.url


async def test_a_document_over_a_megabyte_is_taken_and_one_over_the_cap_is_refused_unread(
    docs: str, http: aiohttp.ClientSession
) -> None:
    """The app's own body cap is 1 MB; uploads read their body up to knowledge.max_document_bytes."""
    target = f"{docs}/v1/collections/docs/documents"
    big = pdf_with_text("a large PDF") + b"%" + b"x" * (5 * MB)
    async with http.post(target, data=io.BytesIO(big), headers={"Content-Type": "application/pdf"}) as r:
        assert r.status == 202, await r.text()
        assert_documented(await r.json(), "Document")
    too_big = b"x" * (11 * MB)
    async with http.post(target, data=io.BytesIO(too_big), headers={"Content-Type": "text/plain"}) as r:
        await expect_error(r, 413, "payload_too_large")

    async def chunked() -> AsyncIterator[bytes]:  # no Content-Length: refused while it is read
        for _ in range(11):
            yield b"y" * MB

    async with http.post(target, data=chunked(), headers={"Content-Type": "text/plain"}) as r:
        await expect_error(r, 413, "payload_too_large")
    encoded = base64.b64encode(b"z" * (10 * MB + 1)).decode()  # within the JSON cap, over the document's
    body = json.dumps({"content_base64": encoded, "content_type": "text/plain"}).encode()
    async with http.post(target, data=io.BytesIO(body), headers={"Content-Type": "application/json"}) as r:
        await expect_error(r, 413, "payload_too_large")


@pytest.mark.parametrize(
    ("headers", "body", "status", "code"),
    [
        ({"Content-Type": "image/png"}, b"\x89PNG", 415, "unsupported_media_type"),
        ({}, b'{"content": "x", "content_type": "image/png"}', 415, "unsupported_media_type"),
        ({}, b'{"content": "x", "content_type": ', 400, "malformed_json"),
        ({}, b'{"content": 5, "content_type": "text/plain"}', 422, "invalid_input"),
        ({}, b'{"content": "x", "content_type": "text/plain", "extra": 1}', 422, "invalid_input"),
        ({}, b'{"content": "x", "content_base64": "eA==", "content_type": "text/plain"}', 422, "invalid_input"),
        ({}, b'{"content_type": "text/plain"}', 422, "invalid_input"),
        ({}, b'{"content": "%PDF", "content_type": "application/pdf"}', 422, "invalid_input"),
        ({}, b'{"content_base64": "not base64!", "content_type": "application/pdf"}', 400, "malformed_base64"),
        ({}, b'{"content": "   ", "content_type": "text/plain"}', 422, "empty_document"),
        ({}, b'{"content": "x", "content_type": "text/plain", "metadata": {"a": {"b": 1}}}', 422, "invalid_input"),
        ({}, b'{"content": "x", "content_type": "text/plain", "metadata": {"$where": 1}}', 422, "invalid_input"),
        ({}, b'{"content": "x", "content_type": "text/plain", "metadata": {"k": [1]}}', 422, "invalid_input"),
        ({}, b'{"content": "x", "content_type": "text/plain", "metadata": []}', 422, "invalid_input"),
        ({"Content-Type": "text/plain", "Agentos-Metadata": "{nope"}, b"text", 400, "malformed_json"),
        ({"Content-Type": "text/plain", "Agentos-Metadata": '{"a": {}}'}, b"text", 422, "invalid_input"),
        ({"Content-Type": "text/plain", "Agentos-Title": "t" * 600}, b"text", 422, "invalid_input"),
        ({"Content-Type": "text/plain", "Idempotency-Key": "has space"}, b"text", 422, "invalid_input"),
        ({"Content-Type": "text/plain"}, b"", 422, "empty_document"),
    ],
)
async def test_a_bad_upload_is_a_json_4xx(
    docs: str, http: aiohttp.ClientSession, headers: dict[str, str], body: bytes, status: int, code: str
) -> None:
    sent = {"Content-Type": "application/json", **headers}
    async with http.post(f"{docs}/v1/collections/docs/documents", data=body, headers=sent) as r:
        await expect_error(r, status, code)
    async with http.get(f"{docs}/v1/collections/docs/documents") as r:
        assert (await r.json())["data"] == []  # nothing was stored


@pytest.mark.parametrize("name", ["Idempotency-Key", "Agentos-Title", "Agentos-Metadata"])
async def test_an_upload_header_sent_twice_is_a_400_and_stores_nothing(
    docs: str, http: aiohttp.ClientSession, name: str
) -> None:
    """Two Idempotency-Keys name two uploads: neither is taken (it was the first, silently)."""
    value = "{}" if name == "Agentos-Metadata" else "k1"
    headers = CIMultiDict([("Content-Type", "text/plain"), (name, value), (name, value.replace("1", "2"))])
    async with http.post(f"{docs}/v1/collections/docs/documents", data=b"text", headers=headers) as r:
        body = await expect_error(r, 400, "bad_request")
    assert f"{name}: send it once" in body["error"]["message"]
    async with http.get(f"{docs}/v1/collections/docs/documents") as r:
        assert (await r.json())["data"] == []


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"name": "", "embedding_model": "m", "dimensions": 8}, 422, "invalid_input"),
        ({"name": "../etc", "embedding_model": "m", "dimensions": 8}, 422, "invalid_input"),
        ({"name": "x" * 65, "embedding_model": "m", "dimensions": 8}, 422, "invalid_input"),
        ({"name": "ok", "embedding_model": "", "dimensions": 8}, 422, "invalid_input"),
        ({"name": "ok", "embedding_model": "m", "dimensions": 0}, 422, "invalid_input"),
        ({"name": "ok", "embedding_model": "m", "dimensions": 4097}, 422, "invalid_input"),
        ({"name": "ok", "embedding_model": "m", "dimensions": 8, "chunk_tokens": 10, "chunk_overlap": 10}, 422, None),
        ({"name": "ok", "embedding_model": "m"}, 422, "invalid_input"),
        ({"name": "ok", "embedding_model": "m", "dimensions": 8, "tenant_id": "other"}, 422, "invalid_input"),
        ({"name": "docs", "embedding_model": "m", "dimensions": 8}, 409, "collection_exists"),
    ],
)
async def test_a_bad_collection_is_a_json_4xx(
    docs: str, http: aiohttp.ClientSession, body: dict[str, Any], status: int, code: str | None
) -> None:
    async with http.post(f"{docs}/v1/collections", json=body) as r:
        await expect_error(r, status, code)


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"query": ""}, 422),
        ({"query": "x" * 8193}, 422),
        ({"query": "x", "top_k": 0}, 422),
        ({"query": "x", "top_k": 101}, 422),
        ({"query": "x", "filter": {"k": {"$gt": 1}}}, 422),
        ({"query": "x", "filter": {"k": None}}, 422),
        ({"query": "x", "filter": {"bad key": 1}}, 422),
        ({"query": "x", "filter": []}, 422),
        ({"top_k": 3}, 422),
    ],
)
async def test_a_bad_query_is_a_json_4xx(
    docs: str, http: aiohttp.ClientSession, body: dict[str, Any], status: int
) -> None:
    async with http.post(f"{docs}/v1/collections/docs/query", json=body) as r:
        await expect_error(r, status)


@pytest.mark.parametrize("name", ["nope", "..", "%2e%2e", "x" * 300, "docs%00"])
async def test_unknown_or_hostile_collection_names_are_404s(docs: str, http: aiohttp.ClientSession, name: str) -> None:
    for method, path, body in (
        ("GET", "", None),
        ("DELETE", "", None),
        ("GET", "/documents", None),
        ("POST", "/documents", {"content": "x", "content_type": "text/plain"}),
        ("POST", "/query", {"query": "x"}),
        ("GET", "/documents/doc_x", None),
    ):
        async with http.request(method, f"{docs}/v1/collections/{name}{path}", json=body) as r:
            assert r.status == 404, (method, path, await r.text())
            assert (await r.json())["error"]["code"] in ("collection_not_found", "not_found")


async def test_documents_are_listed_in_pages_and_every_answer_is_documented(
    docs: str, http: aiohttp.ClientSession
) -> None:
    made = [await upload(http, docs, f"note number {i} about rivers") for i in range(3)]
    for document in made:
        assert_documented(await ready(http, docs, document), "Document")
    target = f"{docs}/v1/collections/docs/documents"
    async with http.get(target, params={"limit": "2"}) as r:
        page = await r.json()
    assert_documented(page, "DocumentPage")
    assert page["next_cursor"] == page["data"][-1]["document_id"] and len(page["data"]) == 2
    async with http.get(target, params={"limit": "2", "after": page["next_cursor"]}) as r:
        rest = await r.json()
    assert rest["next_cursor"] is None
    assert sorted(d["document_id"] for d in page["data"] + rest["data"]) == sorted(d["document_id"] for d in made)
    async with http.get(target, params={"limit": "0"}) as r:
        await expect_error(r, 422, "invalid_input")
    async with http.get(f"{docs}/v1/collections") as r:
        assert_documented(await r.json(), "CollectionPage")
    async with http.post(f"{docs}/v1/collections/docs/query", json={"query": "rivers", "top_k": 2}) as r:
        answer = await r.json()
    assert_documented(answer, "QueryResults")
    assert len(answer["results"]) == 2
