"""Fill a collection in process, through the `KnowledgeStorage` the server uses, with the mock
provider's own embedding function: how the bench reaches 10k and 100k chunks in minutes on two
cores, and how it times ingest with the embedding excluded.

The pipeline is the indexer's, minus the provider call: insert the document (committed, as the
API does before its 202), claim it, extract its text, split it into chunks, save the chunks with
their vectors and mark it ready. The vectors are computed before the clock starts, by the same
function the mock's `/v1/embeddings` answers with, so a query embedded later by the server
through the mock lands in the same space.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agentos.knowledge.records import ChunkRow, Collection, DocumentRow
from agentos_bench.knowledge.client import CONTENT_TYPE
from agentos_bench.knowledge.corpus import Document

if TYPE_CHECKING:
    import numpy as np

    from agentos.knowledge.storage import KnowledgeStorage

_CLAIM_BATCH = 256
_OWNER = "bench-fill"


def mock_vectors(texts: Sequence[str], model: str, dimensions: int) -> np.ndarray:
    """The vectors the mock provider's `/v1/embeddings` answers for `texts` with `model` (float32,
    one row each: the server stores and searches float32)."""
    import numpy as np

    from agentos.mock.embeddings import embed_texts

    if not texts:
        return np.zeros((0, dimensions), dtype=np.float32)
    return embed_texts(list(texts), model, dimensions).astype(np.float32)


@dataclass(frozen=True, slots=True)
class Prepared:
    """A document's chunks and their vectors, made before the timed part."""

    document: Document
    vectors: list[bytes]


@dataclass(frozen=True, slots=True)
class FillResult:
    documents: int
    chunks: int
    seconds: float  # the timed part: insert, claim, extract, split, save (no embedding)
    embed_seconds: float  # computing the mock's vectors in process (not the provider over HTTP)


def prepare(documents: Sequence[Document], collection: Collection) -> tuple[list[Prepared], float]:
    """Chunk each document as the indexer will and compute its chunks' vectors; (prepared, embed seconds)."""
    from agentos.knowledge.chunking import split
    from agentos.knowledge.extract import extract_text

    size, overlap = collection.chunk_tokens, collection.chunk_overlap
    chunked = [split(extract_text(_content(d), CONTENT_TYPE), size, overlap) for d in documents]
    texts = [text for chunks in chunked for text in chunks]
    started = time.perf_counter()
    vectors = mock_vectors(texts, collection.embedding_model, collection.dimensions)
    embed_s = time.perf_counter() - started
    prepared, at = [], 0
    for document, chunks in zip(documents, chunked, strict=True):
        prepared.append(Prepared(document, [vectors[i].tobytes() for i in range(at, at + len(chunks))]))
        at += len(chunks)
    return prepared, embed_s


async def fill(
    storage: KnowledgeStorage, collection: Collection, prepared: Sequence[Prepared], max_documents: int
) -> tuple[int, float]:
    """Ingest `prepared` into `collection` (the timed part); (chunks written, seconds)."""
    vectors: dict[str, list[bytes]] = {}
    started = time.perf_counter()
    chunks = 0
    for start in range(0, len(prepared), _CLAIM_BATCH):
        batch = prepared[start : start + _CLAIM_BATCH]
        for item in batch:
            row = await storage.insert_document(
                _row(collection, item.document), _content(item.document), max_documents=max_documents
            )
            vectors[row.document_id] = item.vectors
        chunks += await _index_claimed(storage, vectors, len(batch))
    return chunks, time.perf_counter() - started


async def _index_claimed(storage: KnowledgeStorage, vectors: dict[str, list[bytes]], count: int) -> int:
    from agentos.knowledge.chunking import split
    from agentos.knowledge.extract import extract_text

    written = 0
    now = _now_ms()
    for row, collection, content in await storage.claim_documents(_OWNER, now, 600_000, count):
        texts = split(extract_text(content, row.content_type), collection.chunk_tokens, collection.chunk_overlap)
        blobs = vectors.pop(row.document_id)
        chunks = [
            ChunkRow(0, row.document_id, i, text, blob) for i, (text, blob) in enumerate(zip(texts, blobs, strict=True))
        ]
        if not await storage.save_chunks(_OWNER, row.document_id, chunks, _now_ms()):
            raise RuntimeError(f"the storage refused the chunks of {row.document_id}")
        written += len(chunks)
    return written


def _row(collection: Collection, document: Document) -> DocumentRow:
    content = _content(document)
    now = _now_ms()
    return DocumentRow(
        document_id=f"doc_{secrets.token_hex(10)}",
        tenant_id=collection.tenant_id,
        collection_id=collection.collection_id,
        title=document.title,
        content_type=CONTENT_TYPE,
        size_bytes=len(content),
        sha256=hashlib.sha256(content).hexdigest(),
        metadata=document.metadata,
        status="queued",
        created_ms=now,
        updated_ms=now,
    )


def _content(document: Document) -> bytes:
    return document.text.encode()


def _now_ms() -> int:
    return int(time.time() * 1000)
