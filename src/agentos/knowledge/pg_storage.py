"""The `KnowledgeStorage` of `store.backend = "postgres"`: the tables of migration 0006 in the
store's database, shared by every node (see `agentos.knowledge.storage` for the contract).

Theory of operation.
- Durability: every write is a transaction committed before the call returns
  (`synchronous_commit` on, the server's default), so the 202 of an accepted document follows
  a durable commit.
- Several nodes index together: `claim_documents` takes documents with `FOR UPDATE SKIP
  LOCKED`, so two nodes never claim the same one, and a lease that ran out (a node died) makes
  the document claimable again; `save_chunks` and `fail_document` check the lease owner.
- Vectors are float32 little-endian `bytea`, loaded by the service into an in-memory index
  (numpy) exactly as with SQLite: pgvector is not installed on the PostgreSQL this project
  targets, and brute force over a collection is fast enough at the sizes one tenant holds.
- Chunk ids come from one `bigserial`. A sequence hands out numbers in call order but
  transactions commit in any order, so an index that loaded "every chunk up to N" could skip a
  chunk numbered below N that committed later. `save_chunks` therefore locks the collection's
  row (`FOR NO KEY UPDATE`) before it draws any id and holds it to its commit: within one
  collection, chunk ids commit in id order, and `vectors_after(N)` never misses a chunk.
- Full text: none in the database. The service searches its in-memory `TextIndex`, loaded
  by `chunks_after` from the chunks' text (migration 0010 dropped the generated `tsvector`
  column and its GIN index that 0006 made: written with every chunk, read by nothing).
- Every wait is bounded by `store.postgres_request_timeout_s`; an unreachable database is
  `StoreUnavailable` (503), as for the rest of the PostgreSQL store.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from agentos.errors import Conflict, NotFound
from agentos.knowledge import filters
from agentos.knowledge.records import (
    COLLECTION_COLUMNS,
    DOCUMENT_COLUMNS,
    ChunkBatch,
    ChunkRow,
    Collection,
    DocumentRow,
    collection_row,
    document_row,
)
from agentos.store.pg_side_pool import SidePool

if TYPE_CHECKING:
    import asyncpg

    from agentos.config import StoreConfig

T = TypeVar("T")


class PgKnowledgeStorage:
    def __init__(self, config: StoreConfig) -> None:
        self._db = SidePool(config, "knowledge")

    async def open(self) -> None:
        """Migrate, then open a small pool (`agentos.store.pg_side_pool`).

        Raises:
            ConfigError: naming store.postgres_url (unreachable, a schema mismatch) or
                store.backend (no asyncpg).
        """
        await self._db.open()

    async def close(self) -> None:
        await self._db.close()

    async def _use(self, use: Callable[[asyncpg.Connection], Awaitable[T]], what: str) -> T:
        return await self._db.use(use, f"knowledge {what}")

    async def _in_transaction(self, use: Callable[[asyncpg.Connection], Awaitable[T]], what: str) -> T:
        async def run(conn: asyncpg.Connection) -> T:
            async with conn.transaction():
                return await use(conn)

        return await self._use(run, what)

    async def _fetch(self, what: str, sql: str, *args: Any) -> list[Any]:
        async def run(conn: asyncpg.Connection) -> list[Any]:
            rows: list[Any] = await conn.fetch(sql, *args)
            return rows

        return await self._use(run, what)

    # --- collections ---

    async def create_collection(self, collection: Collection, *, max_per_tenant: int) -> Collection:
        c = collection

        async def create(conn: asyncpg.Connection) -> Collection:
            await conn.execute(LOCK_TENANT, TENANT_LOCK, c.tenant_id)  # count and insert as one
            if await conn.fetchval(COLLECTION_EXISTS, c.tenant_id, c.name):
                raise Conflict(f"collection {c.name!r} exists", code="collection_exists")
            if await conn.fetchval(COUNT_COLLECTIONS, c.tenant_id) >= max_per_tenant:
                raise Conflict(f"at most {max_per_tenant} collections per tenant", code="too_many_collections")
            row = await conn.fetchrow(
                INSERT_COLLECTION,
                c.collection_id,
                c.tenant_id,
                c.name,
                c.embedding_model,
                c.dimensions,
                c.chunk_tokens,
                c.chunk_overlap,
                c.created_ms,
                c.description,
            )
            return collection_row(row)

        return await self._in_transaction(create, "create collection")

    async def get_collection(self, tenant_id: str, name: str) -> Collection | None:
        rows = await self._fetch("get collection", GET_COLLECTION, tenant_id, name)
        return collection_row(rows[0]) if rows else None

    async def list_collections(self, tenant_id: str) -> list[Collection]:
        return [collection_row(r) for r in await self._fetch("list collections", LIST_COLLECTIONS, tenant_id)]

    async def delete_collection(self, tenant_id: str, name: str) -> Collection | None:
        rows = await self._fetch("delete collection", DELETE_COLLECTION, tenant_id, name)
        return collection_row(rows[0]) if rows else None

    # --- documents ---

    async def insert_document(self, document: DocumentRow, content: bytes, *, max_documents: int) -> DocumentRow:
        d = document
        filters.refuse_nul(d)

        async def insert(conn: asyncpg.Connection) -> DocumentRow:
            counted = await conn.fetchrow(LOCK_COLLECTION, d.collection_id, d.tenant_id)
            if counted is None:
                raise NotFound("collection not found")
            if d.idempotency_key is not None:
                existing = await conn.fetchrow(BY_IDEMPOTENCY_KEY, d.collection_id, d.idempotency_key)
                if existing is not None:
                    return document_row(existing)
            if counted[0] >= max_documents:
                raise Conflict(f"at most {max_documents} documents per collection", code="too_many_documents")
            row = await conn.fetchrow(INSERT_DOCUMENT, *document_params(d))
            await conn.execute(INSERT_CONTENT, d.document_id, content)
            await conn.execute(COUNT_DOCUMENT, d.collection_id)
            return document_row(row)

        return await self._in_transaction(insert, "insert document")

    async def get_document(self, tenant_id: str, collection_id: str, document_id: str) -> DocumentRow | None:
        rows = await self._fetch("get document", GET_DOCUMENT, document_id, collection_id, tenant_id)
        return document_row(rows[0]) if rows else None

    async def list_documents(
        self, tenant_id: str, collection_id: str, *, limit: int, after: str | None
    ) -> list[DocumentRow]:
        rows = await self._fetch("list documents", LIST_DOCUMENTS, collection_id, tenant_id, after or "", limit)
        return [document_row(r) for r in rows]

    async def delete_document(self, tenant_id: str, collection_id: str, document_id: str) -> bool:
        async def delete(conn: asyncpg.Connection) -> bool:
            if await conn.fetchrow(LOCK_COLLECTION, collection_id, tenant_id) is None:
                return False
            chunks = await conn.fetchval(DELETE_DOCUMENT, document_id, collection_id, tenant_id)
            if chunks is None:
                return False
            await conn.execute(UNCOUNT_DOCUMENT, collection_id, chunks)
            return True

        return await self._in_transaction(delete, "delete document")

    # --- the indexer ---

    async def claim_documents(
        self, owner: str, now_ms: int, lease_ms: int, limit: int
    ) -> list[tuple[DocumentRow, Collection, bytes]]:
        async def claim(conn: asyncpg.Connection) -> list[tuple[DocumentRow, Collection, bytes]]:
            docs = sorted(
                (document_row(r) for r in await conn.fetch(CLAIM, owner, now_ms, lease_ms, limit)),
                key=lambda d: (d.created_ms, d.document_id),
            )
            if not docs:
                return []
            ids = [d.document_id for d in docs]
            collections = await conn.fetch(COLLECTIONS_BY_ID, list({d.collection_id for d in docs}))
            by_id = {r[0]: collection_row(r) for r in collections}
            bodies = {r[0]: bytes(r[1]) for r in await conn.fetch(CONTENTS, ids)}
            return [(d, by_id[d.collection_id], bodies[d.document_id]) for d in docs]

        return await self._in_transaction(claim, "claim documents")

    async def renew_lease(self, owner: str, document_ids: Sequence[str], until_ms: int) -> None:
        await self._fetch("renew lease", RENEW, owner, list(document_ids), until_ms)

    async def save_chunks(self, owner: str, document_id: str, chunks: Sequence[ChunkRow], now_ms: int) -> bool:
        ordered = sorted(chunks, key=lambda c: c.ordinal)

        async def save(conn: asyncpg.Connection) -> bool:
            collection_id = await conn.fetchval(DOCUMENT_COLLECTION, document_id)
            # the collection's lock before any chunk id is drawn: ids of a collection commit in order
            if collection_id is None or await conn.fetchval(LOCK_COLLECTION_BY_ID, collection_id) is None:
                return False
            if await conn.execute(MARK_READY, document_id, owner, len(ordered), now_ms) == "UPDATE 0":
                return False
            await conn.executemany(
                INSERT_CHUNK,
                # PostgreSQL text holds no NUL; a NUL an extractor let through is dropped, not an error
                [(collection_id, document_id, c.ordinal, c.text.replace("\x00", ""), c.vector) for c in ordered],
            )
            await conn.execute(COUNT_CHUNKS, collection_id, len(ordered))
            return True

        return await self._in_transaction(save, "save chunks")

    async def fail_document(self, owner: str, document_id: str, reason: str, now_ms: int) -> None:
        await self._fetch("fail document", FAIL, owner, document_id, reason.replace("\x00", ""), now_ms)

    # --- queries ---

    async def vectors_after(self, collection_id: str, after_chunk_id: int) -> tuple[list[int], list[str], bytes]:
        # Chunks exist only for ready documents (save_chunks writes them with the `ready` status).
        rows = await self._fetch("vectors", VECTORS_AFTER, collection_id, after_chunk_id)
        return [r[0] for r in rows], [r[1] for r in rows], b"".join(bytes(r[2]) for r in rows)

    async def chunks_after(self, collection_id: str, after_chunk_id: int) -> ChunkBatch:
        rows = await self._fetch("chunks after", CHUNKS_AFTER, collection_id, after_chunk_id)
        return ChunkBatch(
            [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], b"".join(bytes(r[3]) for r in rows)
        )

    async def index_version(self, collection_id: str) -> tuple[int, int]:
        row = (await self._fetch("index version", INDEX_VERSION, collection_id))[0]
        return int(row[0] or 0), int(row[1] or 0)

    async def document_metadata(
        self, collection_id: str, document_ids: Sequence[str] | None = None
    ) -> dict[str, tuple[str, dict[str, Any]]]:
        if document_ids is None:
            rows = await self._fetch("document metadata", DOCUMENT_METADATA, collection_id)
        else:
            rows = await self._fetch("document metadata", DOCUMENTS_METADATA, collection_id, list(document_ids))
        return {r[0]: (r[1], json.loads(r[2])) for r in rows}

    async def chunks(self, collection_id: str, chunk_ids: Sequence[int]) -> list[ChunkRow]:
        rows = await self._fetch("chunks", CHUNKS, collection_id, [int(i) for i in chunk_ids])
        return [ChunkRow(r[0], r[1], r[2], r[3]) for r in rows]

    async def pending(self) -> int:
        rows = await self._fetch("pending", PENDING)
        return int(rows[0][0])

    async def next_claim_ms(self) -> int | None:
        due = (await self._fetch("next claim", NEXT_CLAIM))[0][0]
        return None if due is None else int(due)


# -- The statements of `PgKnowledgeStorage` (tables of migrations 0006 and 0010) and its row conversions ----


D_COLUMNS = ", ".join(f"d.{c.strip()}" for c in DOCUMENT_COLUMNS.split(","))

# Two-key advisory locks (a key space apart from the migrations' one-key lock): per tenant,
# around counting and creating its collections.
TENANT_LOCK = 0x6B6E  # "kn"
LOCK_TENANT = "SELECT pg_advisory_xact_lock($1, hashtext($2))"

COLLECTION_EXISTS = "SELECT 1 FROM knowledge_collections WHERE tenant_id = $1 AND name = $2"
COUNT_COLLECTIONS = "SELECT count(*) FROM knowledge_collections WHERE tenant_id = $1"
INSERT_COLLECTION = (
    "INSERT INTO knowledge_collections (collection_id, tenant_id, name, model, dims, chunk_tokens, chunk_overlap,"
    f" created_ms, description) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING {COLLECTION_COLUMNS}"
)
GET_COLLECTION = f"SELECT {COLLECTION_COLUMNS} FROM knowledge_collections WHERE tenant_id = $1 AND name = $2"
LIST_COLLECTIONS = f"SELECT {COLLECTION_COLUMNS} FROM knowledge_collections WHERE tenant_id = $1 ORDER BY name"
DELETE_COLLECTION = (  # cascades to its documents, their content and chunks
    f"DELETE FROM knowledge_collections WHERE tenant_id = $1 AND name = $2 RETURNING {COLLECTION_COLUMNS}"
)
COLLECTIONS_BY_ID = f"SELECT {COLLECTION_COLUMNS} FROM knowledge_collections WHERE collection_id = ANY($1)"

# The collection's row lock: inserts, deletions and chunk saves of one collection take it first
# (then the document's), so a collection's counters stay exact and its chunk ids commit in order.
LOCK_COLLECTION = (
    "SELECT documents FROM knowledge_collections WHERE collection_id = $1 AND tenant_id = $2 FOR NO KEY UPDATE"
)
LOCK_COLLECTION_BY_ID = "SELECT 1 FROM knowledge_collections WHERE collection_id = $1 FOR NO KEY UPDATE"
BY_IDEMPOTENCY_KEY = (
    f"SELECT {DOCUMENT_COLUMNS} FROM knowledge_documents WHERE collection_id = $1 AND idempotency_key = $2"
)
INSERT_DOCUMENT = (
    f"INSERT INTO knowledge_documents ({DOCUMENT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb,"
    f" 'queued', $9, $10, $11, NULL, 0, 0) RETURNING {DOCUMENT_COLUMNS}"
)
INSERT_CONTENT = "INSERT INTO knowledge_content (document_id, body) VALUES ($1, $2)"
COUNT_DOCUMENT = "UPDATE knowledge_collections SET documents = documents + 1 WHERE collection_id = $1"
GET_DOCUMENT = (
    f"SELECT {DOCUMENT_COLUMNS} FROM knowledge_documents"
    " WHERE document_id = $1 AND collection_id = $2 AND tenant_id = $3"
)
LIST_DOCUMENTS = (
    f"SELECT {DOCUMENT_COLUMNS} FROM knowledge_documents WHERE collection_id = $1 AND tenant_id = $2"
    " AND document_id > $3 ORDER BY document_id LIMIT $4"
)
DELETE_DOCUMENT = (  # cascades to its content and chunks
    "DELETE FROM knowledge_documents WHERE document_id = $1 AND collection_id = $2 AND tenant_id = $3 RETURNING chunks"
)
UNCOUNT_DOCUMENT = (
    "UPDATE knowledge_collections SET documents = documents - 1, chunks = chunks - $2, deletions = deletions + 1"
    " WHERE collection_id = $1"
)

CLAIM = f"""WITH picked AS (
    SELECT document_id FROM knowledge_documents
    WHERE status = 'queued' OR (status = 'indexing' AND lease_until_ms < $2)
    ORDER BY created_ms, document_id LIMIT $4 FOR UPDATE SKIP LOCKED
)
UPDATE knowledge_documents d SET status = 'indexing', lease_owner = $1, lease_until_ms = $2 + $3,
    attempts = d.attempts + 1, updated_ms = $2
FROM picked WHERE d.document_id = picked.document_id
RETURNING {D_COLUMNS}"""
CONTENTS = "SELECT document_id, body FROM knowledge_content WHERE document_id = ANY($1)"
RENEW = (
    "UPDATE knowledge_documents SET lease_until_ms = $3 WHERE lease_owner = $1 AND status = 'indexing'"
    " AND document_id = ANY($2)"
)
DOCUMENT_COLLECTION = "SELECT collection_id FROM knowledge_documents WHERE document_id = $1"
MARK_READY = (
    "UPDATE knowledge_documents SET status = 'ready', chunks = $3, reason = NULL, lease_owner = NULL,"
    " lease_until_ms = NULL, updated_ms = $4 WHERE document_id = $1 AND lease_owner = $2 AND status = 'indexing'"
)
INSERT_CHUNK = (
    "INSERT INTO knowledge_chunks (collection_id, document_id, ordinal, text, vector) VALUES ($1, $2, $3, $4, $5)"
)
COUNT_CHUNKS = "UPDATE knowledge_collections SET chunks = chunks + $2 WHERE collection_id = $1"
FAIL = (
    "UPDATE knowledge_documents SET status = 'failed', reason = $3, lease_owner = NULL, lease_until_ms = NULL,"
    " updated_ms = $4 WHERE document_id = $2 AND lease_owner = $1 AND status = 'indexing'"
)

VECTORS_AFTER = (
    "SELECT chunk_id, document_id, vector FROM knowledge_chunks WHERE collection_id = $1 AND chunk_id > $2"
    " ORDER BY chunk_id"
)
CHUNKS_AFTER = (
    "SELECT chunk_id, document_id, text, vector FROM knowledge_chunks WHERE collection_id = $1 AND chunk_id > $2"
    " ORDER BY chunk_id"
)
INDEX_VERSION = (
    "SELECT (SELECT deletions FROM knowledge_collections WHERE collection_id = $1),"
    " (SELECT max(chunk_id) FROM knowledge_chunks WHERE collection_id = $1)"
)
DOCUMENT_METADATA = (
    "SELECT document_id, title, metadata FROM knowledge_documents WHERE collection_id = $1 AND status = 'ready'"
)
DOCUMENTS_METADATA = DOCUMENT_METADATA + " AND document_id = ANY($2)"
CHUNKS = (
    "SELECT chunk_id, document_id, ordinal, text FROM knowledge_chunks WHERE collection_id = $1"
    " AND chunk_id = ANY($2) ORDER BY chunk_id"
)
PENDING = "SELECT count(*) FROM knowledge_documents WHERE status IN ('queued', 'indexing')"
# What CLAIM takes: queued ones now, indexing ones after their lease.
NEXT_CLAIM = (
    "SELECT min(CASE WHEN status = 'queued' THEN 0 ELSE lease_until_ms + 1 END) FROM knowledge_documents"
    " WHERE status IN ('queued', 'indexing')"
)


def document_params(d: DocumentRow) -> tuple[Any, ...]:
    """INSERT_DOCUMENT's parameters."""
    return (
        d.document_id,
        d.tenant_id,
        d.collection_id,
        d.title,
        d.content_type,
        d.size_bytes,
        d.sha256,
        json.dumps(d.metadata),
        d.created_ms,
        d.updated_ms,
        d.idempotency_key,
    )
