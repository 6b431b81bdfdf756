"""The bench's HTTP side: collections, uploads and queries through the server's API, timed at
the client (what a caller waits for, the query's embedding through the mock included)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import aiohttp

from agentos_bench.knowledge.corpus import Document

CONTENT_TYPE = "text/markdown"  # what the bench uploads, and what the in-process fill stores
EMBEDDING_MODEL = "mock-embed"
_POLL_S = 0.05  # how often an ingest's oldest unfinished document is looked at


class BenchHTTPError(RuntimeError):
    """The server answered something the bench cannot go on from."""


async def _json(response: aiohttp.ClientResponse, *expected: int) -> Any:
    body = await response.json(content_type=None)
    if response.status not in expected:
        raise BenchHTTPError(f"{response.method} {response.url.path}: {response.status} {body}")
    return body


async def create_collection(
    http: aiohttp.ClientSession, url: str, name: str, dimensions: int, chunk_tokens: int, overlap: int
) -> dict[str, Any]:
    body = {
        "name": name,
        "embedding_model": EMBEDDING_MODEL,
        "dimensions": dimensions,
        "chunk_tokens": chunk_tokens,
        "chunk_overlap": overlap,
    }
    async with http.post(f"{url}/v1/collections", json=body) as response:
        created: dict[str, Any] = await _json(response, 200, 201)
        return created


async def collection(http: aiohttp.ClientSession, url: str, name: str) -> dict[str, Any]:
    async with http.get(f"{url}/v1/collections/{name}") as response:
        found: dict[str, Any] = await _json(response, 200)
        return found


async def upload(http: aiohttp.ClientSession, url: str, name: str, document: Document) -> str:
    body = {
        "content_type": CONTENT_TYPE,
        "content": document.text,
        "title": document.title,
        "metadata": document.metadata,
    }
    async with http.post(f"{url}/v1/collections/{name}/documents", json=body) as response:
        accepted = await _json(response, 200, 201, 202)
        return str(accepted["document_id"])


async def ingest(
    http: aiohttp.ClientSession, url: str, name: str, documents: Sequence[Document], concurrency: int, timeout_s: float
) -> float:
    """Upload `documents` (`concurrency` at a time) and wait until every one is `ready`; the
    seconds from the first upload to the last one seen ready.

    Raises:
        BenchHTTPError: an upload refused, a document `failed`, or not all ready in `timeout_s`.
    """
    started = time.perf_counter()
    gate = asyncio.Semaphore(concurrency)

    async def one(document: Document) -> str:
        async with gate:
            return await upload(http, url, name, document)

    ids = await asyncio.gather(*(one(d) for d in documents))
    async with asyncio.timeout(timeout_s):
        for document_id in ids:  # the indexer takes them about in order: wait for each in turn
            await _wait_ready(http, f"{url}/v1/collections/{name}/documents/{document_id}")
    return time.perf_counter() - started


async def _wait_ready(http: aiohttp.ClientSession, url: str) -> None:
    while True:
        async with http.get(url) as response:
            document = await _json(response, 200)
        if document["status"] == "ready":
            return
        if document["status"] == "failed":
            raise BenchHTTPError(f"{url}: failed: {document.get('reason')}")
        await asyncio.sleep(_POLL_S)


async def query(
    http: aiohttp.ClientSession, url: str, name: str, text: str, top_k: int, metadata_filter: dict[str, Any] | None
) -> tuple[float, list[dict[str, Any]]]:
    """(seconds, hits) of one query."""
    body: dict[str, Any] = {"query": text, "top_k": top_k}
    if metadata_filter:
        body["filter"] = metadata_filter
    started = time.perf_counter()
    async with http.post(f"{url}/v1/collections/{name}/query", json=body) as response:
        answer = await _json(response, 200)
    elapsed = time.perf_counter() - started
    return elapsed, hits_of(answer)


async def index_bytes(http: aiohttp.ClientSession, url: str) -> int | None:
    """The server's own `agentos_knowledge_index_bytes` gauge (its in-memory indexes: vectors and full text)."""
    async with http.get(f"{url}/metrics") as response:
        text = await response.text()
    for line in text.splitlines():
        if line.startswith("agentos_knowledge_index_bytes "):
            return int(float(line.split()[1]))
    return None


def hits_of(answer: Any) -> list[dict[str, Any]]:
    """The hits of a query answer (`{"hits": [...]}`, `{"data": [...]}` or a bare list)."""
    if isinstance(answer, list):
        return answer
    for key in ("hits", "data", "results"):
        if isinstance(answer.get(key), list):
            found: list[dict[str, Any]] = answer[key]
            return found
    raise BenchHTTPError(f"a query answer without hits: {str(answer)[:200]}")
