"""The rows of knowledge: collections, documents, chunks, and a query's hits."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal

# The columns a collection's and a document's row is read by, the same on both storages
# (`collection_row`, `document_row` take them in this order).
COLLECTION_COLUMNS = (
    "collection_id, tenant_id, name, model, dims, chunk_tokens, chunk_overlap, created_ms, description,"
    " documents, chunks"
)
DOCUMENT_COLUMNS = (
    "document_id, tenant_id, collection_id, title, content_type, size_bytes, sha256, metadata, status,"
    " created_ms, updated_ms, idempotency_key, reason, chunks, attempts"
)


DocumentStatus = Literal["queued", "indexing", "ready", "failed"]


# What the API answers of a hit, in this order.
_HIT_ANSWER = ["document_id", "chunk_id", "ordinal", "text", "score", "title", "metadata"]


@dataclass(frozen=True, slots=True)
class Collection:
    """A tenant's collection. `embedding_model` and `dimensions` are pinned at creation: every
    vector in it comes from that model at that size (a query embeds with the same)."""

    collection_id: str  # random, global ("col_" + 20 hex)
    tenant_id: str
    name: str  # unique per tenant; what the API and an agent's `knowledge` name
    embedding_model: str
    dimensions: int
    chunk_tokens: int
    chunk_overlap: int
    created_ms: int
    description: str = ""
    documents: int = 0  # filled by reads that count (list/get); not stored
    chunks: int = 0

    def to_dict(self) -> dict[str, Any]:
        """Every field but the tenant's id: the caller is that tenant."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "tenant_id"}


@dataclass(frozen=True, slots=True)
class ChunkBatch:
    """Chunks as the in-memory indexes load them: in chunk id order, each with its document,
    text and vector (float32 little-endian, concatenated)."""

    chunk_ids: list[int]
    document_ids: list[str]
    texts: list[str]
    vectors: bytes


@dataclass(frozen=True, slots=True)
class DocumentRow:
    document_id: str  # random, global ("doc_" + 20 hex)
    tenant_id: str
    collection_id: str
    title: str
    content_type: str  # text/plain | text/markdown | text/html | application/pdf
    size_bytes: int
    sha256: str  # of the content as uploaded
    metadata: dict[str, Any]
    status: DocumentStatus
    created_ms: int
    updated_ms: int
    idempotency_key: str | None = None
    reason: str | None = None  # why it failed
    chunks: int = 0
    attempts: int = 0  # indexing attempts started

    def to_dict(self, collection: str) -> dict[str, Any]:
        return {
            "document_id": self.document_id,
            "collection": collection,
            "title": self.title,
            "content_type": self.content_type,
            "size_bytes": self.size_bytes,
            "sha256": self.sha256,
            "metadata": self.metadata,
            "status": self.status,
            "reason": self.reason,
            "chunks": self.chunks,
            "created_ms": self.created_ms,
            "updated_ms": self.updated_ms,
        }


@dataclass(frozen=True, slots=True)
class ChunkRow:
    """One chunk of a document. `chunk_id` is assigned by the storage, increasing: an index that
    has loaded a collection up to chunk N loads only the chunks after N next time."""

    chunk_id: int
    document_id: str
    ordinal: int  # position in its document, from 0
    text: str
    vector: bytes = b""  # float32 little-endian, `dimensions` of them


@dataclass(frozen=True, slots=True)
class Hit:
    document_id: str
    chunk_id: int
    ordinal: int
    text: str
    score: float  # the fused score (reciprocal rank fusion)
    metadata: dict[str, Any] = field(default_factory=dict)  # the document's
    title: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _HIT_ANSWER}


# Rows read back in the column order of both backends' SELECTs (the dataclasses' field order).


def collection_row(row: Sequence[Any]) -> Collection:
    return Collection(*row)


def document_row(row: Sequence[Any]) -> DocumentRow:
    """`metadata` (the eighth column) is stored as JSON text on both backends."""
    values = list(row)
    values[7] = json.loads(values[7])
    return DocumentRow(*values)
