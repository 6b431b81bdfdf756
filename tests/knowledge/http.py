"""Knowledge over HTTP, for tests against the real server: create a collection, upload a
document, wait for its state (polling GET with a short pause, bounded by a deadline), query."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp

DIMS = 64
READY_TIMEOUT_S = 30.0
POLL_PAUSE_S = 0.02


async def create_collection(
    http: aiohttp.ClientSession, url: str, name: str = "docs", headers: dict[str, str] | None = None, **extra: Any
) -> dict[str, Any]:
    body = {"name": name, "embedding_model": "mock-embed", "dimensions": DIMS, **extra}
    async with http.post(f"{url}/v1/collections", json=body, headers=headers) as r:
        assert r.status == 201, await r.text()
        created: dict[str, Any] = await r.json()
        return created


async def upload(
    http: aiohttp.ClientSession,
    url: str,
    content: str | bytes,
    *,
    collection: str = "docs",
    content_type: str = "text/plain",
    title: str = "",
    metadata: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    idempotency_key: str | None = None,
) -> dict[str, Any]:
    """Upload as JSON (text) or as the raw body (bytes); the 202's document."""
    sent = dict(headers or {})
    if idempotency_key is not None:
        sent["Idempotency-Key"] = idempotency_key
    target = f"{url}/v1/collections/{collection}/documents"
    if isinstance(content, str):
        body = {"content": content, "content_type": content_type, "title": title, "metadata": metadata or {}}
        request = http.post(target, json=body, headers=sent)
    else:
        sent |= {"Content-Type": content_type, "Agentos-Title": title}
        if metadata:
            import json

            sent["Agentos-Metadata"] = json.dumps(metadata)
        request = http.post(target, data=content, headers=sent)
    async with request as r:
        assert r.status == 202, await r.text()
        document: dict[str, Any] = await r.json()
        assert r.headers["Location"] == f"/v1/collections/{collection}/documents/{document['document_id']}"
        return document


async def wait_state(
    http: aiohttp.ClientSession,
    url: str,
    document_id: str,
    *,
    collection: str = "docs",
    headers: dict[str, str] | None = None,
    states: tuple[str, ...] = ("ready", "failed"),
    timeout_s: float = READY_TIMEOUT_S,
) -> dict[str, Any]:
    """The document once its status is one of `states` (AssertionError after `timeout_s`)."""
    deadline = time.monotonic() + timeout_s
    while True:
        async with http.get(f"{url}/v1/collections/{collection}/documents/{document_id}", headers=headers) as r:
            assert r.status == 200, await r.text()
            document: dict[str, Any] = await r.json()
        if document["status"] in states:
            return document
        assert time.monotonic() < deadline, f"{document_id} still {document['status']} after {timeout_s}s"
        await asyncio.sleep(POLL_PAUSE_S)  # a pause between polls, bounded by the deadline above


async def ready(http: aiohttp.ClientSession, url: str, document: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    done = await wait_state(http, url, document["document_id"], **kwargs)
    assert done["status"] == "ready", done
    return done


async def query(
    http: aiohttp.ClientSession,
    url: str,
    text: str,
    *,
    collection: str = "docs",
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> list[dict[str, Any]]:
    async with http.post(
        f"{url}/v1/collections/{collection}/query", json={"query": text, **extra}, headers=headers
    ) as r:
        assert r.status == 200, await r.text()
        results: list[dict[str, Any]] = (await r.json())["results"]
        return results


def pdf_with_text(*lines: str) -> bytes:
    """A one-page PDF whose text is `lines` (Helvetica), built by hand: no PDF writer needed."""
    escaped = [line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") for line in lines]
    ops = " ".join(f"({line}) Tj 0 -16 Td" for line in escaped)
    stream = f"BT /F1 12 Tf 72 720 Td {ops} ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R"
        b" /Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)
