"""`knowledge.db`: the embedded `KnowledgeStorage` (see `agentos.knowledge.storage`).

One `Writer` owns the file, as for every SQLite file of Agent OS: each call is one function run
on the writer's thread inside the writer's transaction (`sqlite_tables`), so a check and the
write it guards are never split, and a read sees every write queued before it.

The query path's reads (`get_collection`, the index loads, `chunks`) run on
read-only connections beside the writer (`sqlite_readers`, WAL): a query does not wait behind
the indexer's batches. They see every commit made before they start, so a caller that saw a
write return sees it in its reads.

`synchronous=FULL`, unlike the other files (NORMAL): the service answers 202 for a document
once `insert_document` returns, so that commit must survive a power cut, not only `kill -9`.
The other writes ride the same setting; they are few (one per document indexed).

Vectors are float32 blobs, searched in memory by the service (numpy): the project's Python
cannot load SQLite extensions such as sqlite-vec. The service's full-text search is in memory
too (`text_index`, loaded by `chunks_after`): the file keeps no full-text index of its own (an
FTS5 one was dropped in version 1 of the file, `sqlite_schema`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from agentos.knowledge import filters
from agentos.knowledge import sqlite_tables as t
from agentos.knowledge.records import ChunkBatch, ChunkRow, Collection, DocumentRow
from agentos.knowledge.sqlite_readers import Readers
from agentos.knowledge.sqlite_schema import SCHEMA, migrate
from agentos.store.writer import Writer

T = TypeVar("T")


class SqliteKnowledgeStorage:
    """`KnowledgeStorage` in one SQLite file (`path`; None: in memory, gone at close)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._writer = Writer("knowledge", path, SCHEMA, synchronous="full", migrate=migrate)
        self._readers = None if path is None else Readers(path)

    async def open(self) -> None:
        """Raises: StoreError: the file cannot be opened or its schema applied."""
        await self._writer.open()

    async def close(self) -> None:
        await self._writer.close()
        if self._readers is not None:
            self._readers.close()

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        result: T = await self._writer.submit(apply=fn)
        return result

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """A read of the query path: on a reader connection (`sqlite_readers`), beside the writer."""
        if self._readers is None:
            return await self._run(fn)
        return await self._readers.run(fn)

    # --- collections ---

    async def create_collection(self, collection: Collection, *, max_per_tenant: int) -> Collection:
        return await self._run(partial(t.create_collection, collection, max_per_tenant))

    async def get_collection(self, tenant_id: str, name: str) -> Collection | None:
        return await self._read(partial(t.get_collection, tenant_id, name))

    async def list_collections(self, tenant_id: str) -> list[Collection]:
        return await self._run(partial(t.list_collections, tenant_id))

    async def delete_collection(self, tenant_id: str, name: str) -> Collection | None:
        return await self._run(partial(t.delete_collection, tenant_id, name))

    # --- documents ---

    async def insert_document(self, document: DocumentRow, content: bytes, *, max_documents: int) -> DocumentRow:
        filters.refuse_nul(document)
        await self._writer.wait_space()
        return await self._run(partial(t.insert_document, document, content, max_documents))

    async def get_document(self, tenant_id: str, collection_id: str, document_id: str) -> DocumentRow | None:
        return await self._run(partial(t.get_document, tenant_id, collection_id, document_id))

    async def list_documents(
        self, tenant_id: str, collection_id: str, *, limit: int, after: str | None
    ) -> list[DocumentRow]:
        return await self._run(partial(t.list_documents, tenant_id, collection_id, limit, after))

    async def delete_document(self, tenant_id: str, collection_id: str, document_id: str) -> bool:
        return await self._run(partial(t.delete_document, tenant_id, collection_id, document_id))

    # --- the indexer ---

    async def claim_documents(
        self, owner: str, now_ms: int, lease_ms: int, limit: int
    ) -> list[tuple[DocumentRow, Collection, bytes]]:
        return await self._run(partial(t.claim_documents, owner, now_ms, lease_ms, limit))

    async def renew_lease(self, owner: str, document_ids: Sequence[str], until_ms: int) -> None:
        await self._run(partial(t.renew_lease, owner, list(document_ids), until_ms))

    async def save_chunks(self, owner: str, document_id: str, chunks: Sequence[ChunkRow], now_ms: int) -> bool:
        return await self._run(partial(t.save_chunks, owner, document_id, list(chunks), now_ms))

    async def fail_document(self, owner: str, document_id: str, reason: str, now_ms: int) -> None:
        await self._run(partial(t.fail_document, owner, document_id, reason, now_ms))

    # --- queries ---

    async def vectors_after(self, collection_id: str, after_chunk_id: int) -> tuple[list[int], list[str], bytes]:
        return await self._read(partial(t.vectors_after, collection_id, after_chunk_id))

    async def chunks_after(self, collection_id: str, after_chunk_id: int) -> ChunkBatch:
        return await self._read(partial(t.chunks_after, collection_id, after_chunk_id))

    async def index_version(self, collection_id: str) -> tuple[int, int]:
        return await self._read(partial(t.index_version, collection_id))

    async def document_metadata(
        self, collection_id: str, document_ids: Sequence[str] | None = None
    ) -> dict[str, tuple[str, dict[str, Any]]]:
        ids = None if document_ids is None else list(document_ids)
        return await self._read(partial(t.document_metadata, collection_id, ids))

    async def chunks(self, collection_id: str, chunk_ids: Sequence[int]) -> list[ChunkRow]:
        return await self._read(partial(t.chunks, collection_id, list(chunk_ids)))

    async def pending(self) -> int:
        return await self._run(t.pending)
