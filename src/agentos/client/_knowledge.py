"""Knowledge: collections, their documents, and hybrid retrieval (docs/knowledge.md), as methods
of `AsyncClient` (and `Client`) and the Structs they return."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any, Literal

import msgspec

from agentos.client._http import HttpClient, query_params, url_path
from agentos.client._types import Page

DocumentStatus = Literal["queued", "indexing", "ready", "failed"]
ContentType = Literal["text/plain", "text/markdown", "text/html", "application/pdf"]


class Collection(msgspec.Struct, frozen=True, kw_only=True):
    """A tenant's collection; `embedding_model` and `dimensions` are pinned at its creation."""

    name: str
    collection_id: str
    embedding_model: str
    dimensions: int
    chunk_tokens: int
    chunk_overlap: int
    description: str = ""
    documents: int = 0
    chunks: int = 0
    created_ms: int = 0


class Document(msgspec.Struct, frozen=True, kw_only=True):
    """A document and its state: `queued` and `indexing` until `ready` (searchable), or `failed`
    with a `reason`."""

    document_id: str
    collection: str
    title: str
    content_type: str
    size_bytes: int
    sha256: str
    status: DocumentStatus
    metadata: dict[str, Any] = {}
    reason: str | None = None
    chunks: int = 0
    created_ms: int = 0
    updated_ms: int = 0


class Hit(msgspec.Struct, frozen=True, kw_only=True):
    """One chunk a query found, best first."""

    document_id: str
    chunk_id: int
    ordinal: int
    text: str
    score: float
    title: str = ""
    metadata: dict[str, Any] = {}


class _Hits(msgspec.Struct, frozen=True):
    results: list[Hit]


def _collection(name: str, *rest: str) -> str:
    return url_path("/v1/collections/{}" + "/{}" * len(rest), name, *rest)


class KnowledgeCalls(HttpClient):
    """What `AsyncClient` adds for knowledge (scopes `knowledge:read`, `knowledge:write`)."""

    async def create_collection(
        self,
        name: str,
        embedding_model: str,
        dimensions: int,
        *,
        chunk_tokens: int | None = None,
        chunk_overlap: int | None = None,
        description: str = "",
    ) -> Collection:
        """Raises: APIError: 409 `collection_exists` or `too_many_collections`; 422 `invalid_input`."""
        body: dict[str, Any] = {"name": name, "embedding_model": embedding_model, "dimensions": dimensions}
        body |= {"chunk_tokens": chunk_tokens, "chunk_overlap": chunk_overlap, "description": description}
        return await self._http.call("POST", "/v1/collections", Collection, body=body)

    async def list_collections(self) -> Page[Collection]:
        return await self._http.call("GET", "/v1/collections", Page[Collection])

    async def get_collection(self, name: str) -> Collection:
        """Raises: APIError: 404 `collection_not_found`."""
        return await self._http.call("GET", _collection(name), Collection)

    async def delete_collection(self, name: str) -> None:
        """Delete the collection with its documents and chunks. Raises: APIError: 404."""
        await self._http.call("DELETE", _collection(name), type(None))

    async def add_document(
        self,
        collection: str,
        content: str | bytes,
        content_type: ContentType = "text/plain",
        *,
        title: str = "",
        metadata: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> Document:
        """Upload a document (bytes are sent as base64: a PDF, say); it is `queued` once the
        server has it durably and indexed in the background: poll `get_document` until `ready`.
        The same `idempotency_key` again answers the first upload's document.

        Raises:
            APIError: 404 `collection_not_found`; 409 `idempotency_key_reused` (other content) or
                `too_many_documents`; 413 over `knowledge.max_document_bytes`; 415; 422.
        """
        body: dict[str, Any] = {"content_type": content_type, "title": title, "metadata": dict(metadata or {})}
        if isinstance(content, bytes):
            body["content_base64"] = base64.b64encode(content).decode()
        else:
            body["content"] = content
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        path = _collection(collection) + "/documents"
        return await self._http.call("POST", path, Document, body=body, headers=headers)

    async def list_documents(
        self, collection: str, *, limit: int | None = None, after: str | None = None
    ) -> Page[Document]:
        params = query_params(limit=limit, after=after)
        return await self._http.call("GET", _collection(collection) + "/documents", Page[Document], params=params)

    async def get_document(self, collection: str, document_id: str) -> Document:
        """Raises: APIError: 404 `collection_not_found`, `document_not_found`."""
        return await self._http.call("GET", _collection(collection, "documents", document_id), Document)

    async def delete_document(self, collection: str, document_id: str) -> None:
        await self._http.call("DELETE", _collection(collection, "documents", document_id), type(None))

    async def query(
        self, collection: str, text: str, *, top_k: int | None = None, filter: Mapping[str, Any] | None = None
    ) -> list[Hit]:
        """The chunks that best match `text`, best first: vector and full-text search fused by
        rank, `filter` (metadata equal to a value, or `{"$in": [...]}`) applied inside both.

        Raises:
            APIError: 404 `collection_not_found`; 422; 502 `embedding_failed`; 503
                `embedding_unavailable` (with `retry_after_s`).
        """
        body: dict[str, Any] = {"query": text}
        body |= {k: v for k, v in (("top_k", top_k), ("filter", filter)) if v is not None}
        path = _collection(collection) + "/query"
        return (await self._http.call("POST", path, _Hits, body=body)).results
