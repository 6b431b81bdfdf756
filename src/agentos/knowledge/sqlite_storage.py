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

import asyncio
import sqlite3
import threading
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from agentos.errors import StoreUnavailable
from agentos.knowledge import filters
from agentos.knowledge import sqlite_tables as t
from agentos.knowledge.records import ChunkBatch, ChunkRow, Collection, DocumentRow
from agentos.store.sqlite_table import Table, script
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

    async def next_claim_ms(self) -> int | None:
        return await self._read(t.next_claim_ms)


# -- The tables of `knowledge.db` (created at open) and its migrations (`migrate`, run by the ------
# writer after the schema at every open, as for runs.db).
#
# Chunk ids are `INTEGER PRIMARY KEY AUTOINCREMENT`: never reused, and with one writer thread
# committed in id order, so an index that loaded up to chunk N misses nothing by loading > N.
#
# Versions (`PRAGMA user_version`): 0, the first, also kept an FTS5 index over `chunks` (the
# `chunks_fts` table, its `chunks_vocab` view and two triggers that wrote every chunk's words into
# it); 1 drops them: the service searches its in-memory `TextIndex` (built from `chunks.text`), so
# the FTS5 index was written with every chunk and read by nothing.


VERSION = 1

COLLECTIONS = Table(
    "collections",
    "collection_id TEXT PRIMARY KEY, tenant_id TEXT, name TEXT, model TEXT, dims INTEGER, chunk_tokens INTEGER,"
    " chunk_overlap INTEGER, created_ms INTEGER, description TEXT DEFAULT '', documents INTEGER DEFAULT 0,"
    " chunks INTEGER DEFAULT 0, deletions INTEGER DEFAULT 0",
    constraints=("UNIQUE (tenant_id, name)",),
)
DOCUMENTS = Table(
    "documents",
    "document_id TEXT PRIMARY KEY, tenant_id TEXT, collection_id TEXT, title TEXT, content_type TEXT,"
    " size_bytes INTEGER, sha256 TEXT, metadata TEXT, status TEXT, created_ms INTEGER, updated_ms INTEGER,"
    " idempotency_key TEXT, reason TEXT, chunks INTEGER DEFAULT 0, attempts INTEGER DEFAULT 0, lease_owner TEXT,"
    " lease_until_ms INTEGER",
    nullable=("idempotency_key", "reason", "lease_owner", "lease_until_ms"),
    constraints=("UNIQUE (collection_id, idempotency_key)",),
    indexes=(
        "documents_by_collection (collection_id, document_id)",
        "documents_pending (created_ms) WHERE status IN ('queued', 'indexing')",
    ),
)
# Kept until the document is deleted: a document can be indexed again (another model, a crash).
CONTENT = Table("document_content", "document_id TEXT PRIMARY KEY, body BLOB")
CHUNKS = Table(
    "chunks",
    "chunk_id INTEGER PRIMARY KEY AUTOINCREMENT, collection_id TEXT, document_id TEXT, ordinal INTEGER, text TEXT,"
    " vector BLOB",
    indexes=("chunks_by_collection (collection_id, chunk_id)", "chunks_by_document (document_id)"),
)
SCHEMA = script(COLLECTIONS, DOCUMENTS, CONTENT, CHUNKS)

# 0 -> 1: without the FTS5 index. One transaction: a crash leaves version 0, and the next open
# drops again (every statement is IF EXISTS).
_DROP_FULL_TEXT = """
BEGIN IMMEDIATE;
DROP TRIGGER IF EXISTS chunks_fts_insert;
DROP TRIGGER IF EXISTS chunks_fts_delete;
DROP TABLE IF EXISTS chunks_vocab;
DROP TABLE IF EXISTS chunks_fts;
PRAGMA user_version = 1;
COMMIT;
"""


def migrate(db: sqlite3.Connection) -> None:
    """Bring a `knowledge.db` of an earlier version to `VERSION` (a new file: only numbers it)."""
    (version,) = db.execute("PRAGMA user_version").fetchone()
    if version < 1:
        db.executescript(_DROP_FULL_TEXT)


# -- Read-only connections to `knowledge.db` for the query path, beside its one writer -------------
#
# Why: through the writer, a query's reads queue behind the indexer's batches (chunks, their
# full-text entries, an fsync each), and two queries' searches run one after the other on the
# writer's thread. The file is in WAL mode, so readers on their own connections run alongside the
# writer and each other, and never block it.
#
# Each read runs in a worker thread (`asyncio.to_thread`) on that thread's own connection, opened
# read-only on first use; every statement is its own read transaction (autocommit), so it sees
# every transaction committed before it started: a document that reads `ready` (committed by the
# writer with its chunks) has its chunks visible to any read that starts afterwards.
#
# A database in memory (no file) has no second connection: `Readers(None)` runs nothing and the
# storage reads through the writer instead.


_BUSY_TIMEOUT_MS = 5000


class Readers:
    def __init__(self, path: Path) -> None:
        self._uri = f"{path.resolve().as_uri()}?mode=ro"
        self._local = threading.local()
        self._opened: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._closed = False

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """`fn(connection)` in a worker thread. Raises: StoreUnavailable once closed or when the
        file cannot be read."""
        return await asyncio.to_thread(self._call, fn)

    def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        try:
            return fn(self._connection())
        except (sqlite3.OperationalError, sqlite3.ProgrammingError) as exc:  # ProgrammingError: closed meanwhile
            raise StoreUnavailable(f"knowledge.db cannot be read: {exc}") from exc

    def _connection(self) -> sqlite3.Connection:
        if self._closed:  # this thread's connection, if it has one, is closed
            raise StoreUnavailable("knowledge.db is closed")
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None:
            return conn
        with self._lock:
            if self._closed:
                raise StoreUnavailable("knowledge.db is closed")
            # check_same_thread=False only so that close() can close it from another thread:
            # it is used by this thread alone
            conn = sqlite3.connect(self._uri, uri=True, check_same_thread=False, isolation_level=None)
            conn.execute(f"PRAGMA busy_timeout={_BUSY_TIMEOUT_MS}")
            self._opened.append(conn)
        self._local.conn = conn
        return conn

    def close(self) -> None:
        """Close every connection (called once no read is running: the storage closes last)."""
        with self._lock:
            self._closed = True
            opened, self._opened = self._opened, []
        for conn in opened:
            conn.close()
