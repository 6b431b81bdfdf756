"""Where knowledge lives: the `KnowledgeStorage` protocol.

Two implementations pass the same contract tests: `SqliteKnowledgeStorage` (`knowledge.db`
beside the other embedded files, its own writer with `synchronous=FULL`: an accepted document
survives a power cut, not only `kill -9`) and `PgKnowledgeStorage` (tables of migrations 0006 and 0010 in
the PostgreSQL store's database).

Tenancy: every read and write a request can reach names the tenant in its WHERE clause; another
tenant's collection or document reads as missing. Only the indexer's `claim_documents` and the
index loads (`vectors_after`, by a collection id the service already resolved for the caller)
work across tenants.

Metadata filters are `{"key": value, ...}` (all must match; a value is a string, number or
boolean, compared for equality, or `{"$in": [values]}`); the service applies them inside its
in-memory searches, on `document_metadata`. Neither store keeps a full-text index: the service's
is in memory, built from the chunks' text (`chunks_after`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from agentos.config import Settings
from agentos.knowledge.records import ChunkBatch, ChunkRow, Collection, DocumentRow
from agentos.knowledge.sqlite_storage import SqliteKnowledgeStorage


class KnowledgeStorage(Protocol):
    async def open(self) -> None:
        """Open (create the schema / check the migrations). Raises: StoreError, ConfigError."""
        ...

    async def close(self) -> None: ...

    # --- collections ---

    async def create_collection(self, collection: Collection, *, max_per_tenant: int) -> Collection:
        """Raises: Conflict (`collection_exists`: the tenant has one of that name),
        QuotaExceeded-like Conflict (`too_many_collections`)."""
        ...

    async def get_collection(self, tenant_id: str, name: str) -> Collection | None:
        """With its `documents` and `chunks` counts."""
        ...

    async def list_collections(self, tenant_id: str) -> list[Collection]: ...

    async def delete_collection(self, tenant_id: str, name: str) -> Collection | None:
        """Delete it with its documents and chunks, in one transaction; the deleted row or None."""
        ...

    # --- documents ---

    async def insert_document(self, document: DocumentRow, content: bytes, *, max_documents: int) -> DocumentRow:
        """Commit the document (status `queued`) and its content durably; return once committed.
        With an `idempotency_key` that the collection already has, nothing is written and the
        existing row is returned (the caller compares it). Raises: Conflict
        (`too_many_documents`), StoreError."""
        ...

    async def get_document(self, tenant_id: str, collection_id: str, document_id: str) -> DocumentRow | None: ...

    async def list_documents(
        self, tenant_id: str, collection_id: str, *, limit: int, after: str | None
    ) -> list[DocumentRow]:
        """Ordered by document id (the cursor `after` is the last id of the previous page)."""
        ...

    async def delete_document(self, tenant_id: str, collection_id: str, document_id: str) -> bool:
        """Delete it and its chunks in one transaction."""
        ...

    # --- the indexer ---

    async def claim_documents(
        self, owner: str, now_ms: int, lease_ms: int, limit: int
    ) -> list[tuple[DocumentRow, Collection, bytes]]:
        """Take up to `limit` documents that are `queued`, or `indexing` with a lease that ran out
        (a crashed indexer, here or on another node): set `indexing`, the lease to `owner` until
        `now_ms + lease_ms`, `attempts + 1`; return them with their collection and content."""
        ...

    async def renew_lease(self, owner: str, document_ids: Sequence[str], until_ms: int) -> None: ...

    async def save_chunks(self, owner: str, document_id: str, chunks: Sequence[ChunkRow], now_ms: int) -> bool:
        """In one transaction: insert the chunks (text and vector; `chunk_id` is
        assigned here, increasing), set the document `ready` with its chunk count, clear the
        lease. False (nothing written) if the document is gone or `owner` no longer holds it."""
        ...

    async def fail_document(self, owner: str, document_id: str, reason: str, now_ms: int) -> None: ...

    # --- queries ---

    async def vectors_after(self, collection_id: str, after_chunk_id: int) -> tuple[list[int], list[str], bytes]:
        """(chunk ids, their document ids, their vectors concatenated) of the chunks of ready
        documents with chunk_id > `after_chunk_id`, in chunk_id order."""
        ...

    async def chunks_after(self, collection_id: str, after_chunk_id: int) -> ChunkBatch:
        """`vectors_after` with each chunk's text: what the in-memory indexes (vectors and full
        text) load, in one read, so both hold the same chunks."""
        ...

    async def index_version(self, collection_id: str) -> tuple[int, int]:
        """(deletions, highest chunk id): `deletions` grows with every deleted document, so an
        in-memory index knows when to drop chunks and when only to load new ones."""
        ...

    async def document_metadata(
        self, collection_id: str, document_ids: Sequence[str] | None = None
    ) -> dict[str, tuple[str, dict[str, Any]]]:
        """document id -> (title, metadata) of the collection's ready documents (the vector
        search evaluates filters on it); with `document_ids`, of those among them only (an index
        that loaded new chunks reads its new documents, not the whole collection again)."""
        ...

    async def chunks(self, collection_id: str, chunk_ids: Sequence[int]) -> list[ChunkRow]:
        """The chunks (without vectors) of the collection among `chunk_ids`."""
        ...

    async def pending(self) -> int:
        """Documents `queued` or `indexing` (every tenant's): the backlog gauge."""
        ...

    async def next_claim_ms(self) -> int | None:
        """When `claim_documents` can take a document next: 0 while one is `queued`, else just
        after the earliest lease of an `indexing` one ends (a dead node's, a postponement); None
        with neither. An idle indexer looks again by then."""
        ...


# -- Which `KnowledgeStorage` a node opens: the store's PostgreSQL database with -------------------
# `store.backend = "postgres"` (asyncpg is imported only then, when the storage opens), else
# `<data_dir>/knowledge.db` (in memory without a data directory: the store is off).


def open_storage(settings: Settings, data_dir: Path | None) -> KnowledgeStorage:
    """The storage, not yet opened (`await storage.open()`: KnowledgeService.start does)."""
    if settings.store.enabled and settings.store.backend == "postgres":
        from agentos.knowledge.pg_storage import PgKnowledgeStorage  # asyncpg only on this backend

        return PgKnowledgeStorage(settings.store)
    return SqliteKnowledgeStorage(None if data_dir is None else data_dir / "knowledge.db")
