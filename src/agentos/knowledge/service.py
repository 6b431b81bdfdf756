"""`KnowledgeService`: collections, documents and queries of every tenant; what the HTTP
routes (`agentos.api.knowledge`) and the agents' `search_knowledge` tool call.

Every method takes the caller's tenant and resolves the collection by (tenant, name) first:
another tenant's collection reads as missing, and everything after works on the collection id
that lookup returned. A query's hits are checked once more against that collection's documents
before they are returned (fail closed: a chunk whose document is not a ready document of that
collection is left out, and logged).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from agentos.clock import wall_ms
from agentos.config import Settings
from agentos.errors import Conflict, NotFound, ProviderError, ProviderLimitTimeout, RequestError
from agentos.ids import new_id
from agentos.knowledge import filters, indexes
from agentos.knowledge.embeddings import Embeddings
from agentos.knowledge.indexer import Indexer
from agentos.knowledge.indexes import IndexCache, IndexEntry
from agentos.knowledge.inputs import CollectionCreate, as_struct, collection_settings, query_text, query_top_k
from agentos.knowledge.metrics import KnowledgeCollector
from agentos.knowledge.records import Collection, DocumentRow, Hit
from agentos.knowledge.retrieval import candidates, fuse
from agentos.knowledge.storage import KnowledgeStorage
from agentos.knowledge.words import query_terms

log = logging.getLogger("agentos.knowledge")


class EmbeddingUnavailable(RequestError):
    """The query could not be embedded: the provider is down or overloaded (retry), or answers
    vectors that do not fit the collection (`embedding_failed`)."""

    status = 503
    code = "embedding_unavailable"
    retry_after_s = 1


class EmbeddingFailed(RequestError):
    """The provider answered, but no usable vector (another size, a refusal): retrying the
    same query will not help; the collection's pinned model may be gone from the provider."""

    status = 502
    code = "embedding_failed"


class KnowledgeService:
    """Usage::

    service = KnowledgeService(settings, open_knowledge_storage(settings, data_dir), Embedder(settings, driver))
    await service.start()          # opens the storage; the indexer resumes queued documents
    await service.create_collection("acme", {"name": "docs", "embedding_model": "m", "dimensions": 256})
    doc, replayed = await service.accept_document("acme", "docs", b"...", "text/markdown", metadata={"team": "a"})
    hits = await service.query("acme", "docs", "how do I ...", top_k=5, metadata_filter={"team": "a"})
    await service.close()
    """

    def __init__(
        self,
        settings: Settings,
        storage: KnowledgeStorage,
        embedder: Embeddings,
        *,
        now_ms: Callable[[], int] = wall_ms,
    ) -> None:
        self.config = settings.knowledge
        self.storage = storage
        self._embedder = embedder
        self._now_ms = now_ms
        self._indexes = IndexCache(storage, self.config.index_idle_s)
        embedded = settings.store.backend != "postgres"
        self.indexer = Indexer(self.config, storage, embedder, now_ms, embedded=embedded, on_tick=self._indexes.sweep)

    async def start(self) -> None:
        await self.storage.open()
        try:
            await self.indexer.start()
        except BaseException:  # the caller closes only what started: leave nothing open
            await self.indexer.close()
            await self._embedder.aclose()
            await self.storage.close()
            raise

    async def close(self) -> None:
        await self.indexer.close()
        await self._embedder.aclose()
        await self.storage.close()

    def register_metrics(self, registry: CollectorRegistry) -> None:
        """The knowledge gauges and counters (backlog, documents indexed/failed, index memory)."""
        registry.register(KnowledgeCollector(self.indexer.stats, lambda: self._indexes.nbytes))

    # --- collections ---

    async def create_collection(self, tenant_id: str, body: Mapping[str, Any] | CollectionCreate) -> Collection:
        """Raises: InvalidInput, Conflict (`collection_exists`, `too_many_collections`)."""
        spec = as_struct(body)
        tokens, overlap = collection_settings(spec, self.config)
        collection = Collection(
            new_id("col"),
            tenant_id,
            spec.name,
            spec.embedding_model,
            spec.dimensions,
            tokens,
            overlap,
            self._now_ms(),
            spec.description,
        )
        return await self.storage.create_collection(collection, max_per_tenant=self.config.max_collections)

    async def list_collections(self, tenant_id: str) -> list[Collection]:
        return await self.storage.list_collections(tenant_id)

    async def get_collection(self, tenant_id: str, name: str) -> Collection:
        """Raises: NotFound (another tenant's reads the same as a missing one)."""
        collection = await self.storage.get_collection(tenant_id, name)
        if collection is None or collection.tenant_id != tenant_id:
            raise _not_found("collection", name)
        return collection

    async def delete_collection(self, tenant_id: str, name: str) -> None:
        deleted = await self.storage.delete_collection(tenant_id, name)
        if deleted is None:
            raise _not_found("collection", name)
        self._indexes.drop(deleted.collection_id)

    # --- documents ---

    async def accept_document(
        self,
        tenant_id: str,
        collection: str,
        content: bytes,
        content_type: str,
        *,
        title: str = "",
        metadata: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> tuple[DocumentRow, bool]:
        """The document, committed durably (`queued`) before this returns; the indexer is woken.
        With an `idempotency_key` the collection already has for the same content, the document
        it made (in whatever state it is now), and True: the answer is an earlier upload's (an
        idempotent replay).

        Raises: NotFound, InvalidInput, Conflict (`idempotency_key_reused`: same key, other
        content; `too_many_documents`), StoreError."""
        owner = await self.get_collection(tenant_id, collection)
        now = self._now_ms()
        digest = hashlib.sha256(content).hexdigest()
        row = DocumentRow(
            new_id("doc"),
            tenant_id,
            owner.collection_id,
            title,
            content_type,
            len(content),
            digest,
            dict(metadata or {}),
            "queued",
            now,
            now,
            idempotency_key,
        )
        stored = await self.storage.insert_document(row, content, max_documents=self.config.max_documents)
        if stored.document_id != row.document_id:
            if stored.sha256 != digest or stored.tenant_id != tenant_id:
                raise Conflict("this Idempotency-Key was used for other content", code="idempotency_key_reused")
            return stored, True
        self.indexer.wake()
        return stored, False

    async def get_document(self, tenant_id: str, collection: str, document_id: str) -> tuple[Collection, DocumentRow]:
        owner = await self.get_collection(tenant_id, collection)
        document = await self.storage.get_document(tenant_id, owner.collection_id, document_id)
        if document is None or document.tenant_id != tenant_id or document.collection_id != owner.collection_id:
            raise _not_found("document", document_id)
        return owner, document

    async def list_documents(
        self, tenant_id: str, collection: str, *, limit: int, after: str | None
    ) -> list[DocumentRow]:
        owner = await self.get_collection(tenant_id, collection)
        return await self.storage.list_documents(tenant_id, owner.collection_id, limit=limit, after=after)

    async def delete_document(self, tenant_id: str, collection: str, document_id: str) -> None:
        owner = await self.get_collection(tenant_id, collection)
        if not await self.storage.delete_document(tenant_id, owner.collection_id, document_id):
            raise _not_found("document", document_id)
        self._indexes.invalidate(owner.collection_id)

    # --- queries ---

    async def query(
        self,
        tenant_id: str,
        collection: str,
        query: str,
        *,
        top_k: int,
        metadata_filter: Mapping[str, Any] | None = None,
    ) -> list[Hit]:
        """The `top_k` best chunks of the collection for `query`: vector nearest neighbours and
        full-text matches, each searched with the filter inside, fused by reciprocal rank.

        Raises: NotFound, InvalidInput (query, top_k, filter), EmbeddingUnavailable."""
        query = query_text(query)
        top_k = query_top_k(top_k, self.config)
        parsed = filters.parse_filter(metadata_filter)
        owner = await self.get_collection(tenant_id, collection)
        vector = await self._embed_query(owner, query)
        entry = await self._indexes.current(owner)
        # the mask of the vector search: only the allowed documents' chunks are candidates
        allowed = indexes.allowed(entry, parsed) if parsed else None
        wanted = candidates(top_k)
        if allowed is not None and not allowed:
            return []  # no document passes the filter
        # both searches in one thread hop on a large collection (numpy releases the GIL there); the
        # full-text search beside the embedding's request was measured slower: it holds the GIL the
        # loop needs to read the answer (bench/scripts/knowledge_query_split.py)
        nearest, words = await self._indexes.search_both(entry, vector, query_terms(query), wanted, allowed)
        ranked = fuse([c for c, _ in nearest], [c for c, _ in words], top_k)
        return await self._hits(owner, entry, ranked)

    async def search(
        self,
        tenant_id: str,
        collections: tuple[str, ...],
        query: str,
        top_k: int,
        metadata_filter: Mapping[str, Any] | None = None,
    ) -> list[dict[str, Any]]:
        """The `search_knowledge` tool: hits of the tenant's `collections` fused into one list,
        each with its collection's name (for citations). Raises: NotFound, InvalidInput."""
        found: list[tuple[float, str, Hit]] = []
        for name in dict.fromkeys(collections):
            hits = await self.query(tenant_id, name, query, top_k=top_k, metadata_filter=metadata_filter)
            found += [(hit.score, name, hit) for hit in hits]
        found.sort(key=lambda item: (-item[0], item[1], item[2].chunk_id))
        return [hit.to_dict() | {"collection": name} for _, name, hit in found[:top_k]]

    async def _embed_query(self, owner: Collection, query: str) -> Any:
        try:
            vectors = await self._embedder.embed(owner.tenant_id, owner.embedding_model, owner.dimensions, [query])
        except ProviderError as exc:
            message = f"the query could not be embedded: {exc.code}"
            if exc.retryable or isinstance(exc, ProviderLimitTimeout):
                raise EmbeddingUnavailable(message) from None
            raise EmbeddingFailed(message) from None
        return vectors[0]

    async def _hits(self, owner: Collection, entry: IndexEntry, ranked: list[tuple[int, float]]) -> list[Hit]:
        if not ranked:
            return []
        rows = {row.chunk_id: row for row in await self.storage.chunks(owner.collection_id, [c for c, _ in ranked])}
        # not `set - documents.keys()`: that walks every document of the collection (0.3 ms at 20k)
        missing = {row.document_id for row in rows.values() if row.document_id not in entry.documents}
        if missing:
            await self._indexes.reload_documents(entry, missing)  # ready after the index was read
        hits = []
        for chunk_id, score in ranked:
            row = rows.get(chunk_id)
            if row is None:
                continue  # deleted meanwhile
            if row.document_id not in entry.documents:  # not (or no longer) a ready document of it
                log.warning("chunk %d of %s left out of a query of %s", chunk_id, row.document_id, owner.collection_id)
                continue
            title, metadata = entry.documents[row.document_id]
            hits.append(Hit(row.document_id, chunk_id, row.ordinal, row.text, score, metadata, title))
        return hits


def open_knowledge_storage(settings: Settings, data_dir: Path | None) -> KnowledgeStorage:
    """`knowledge.db` in `data_dir` (in memory without one), or PostgreSQL with
    `store.backend = "postgres"`."""
    from agentos.knowledge.storage import open_storage

    return open_storage(settings, data_dir)


def _not_found(kind: str, name: str) -> NotFound:
    """The 404 of a collection or document (`collection_not_found`, `document_not_found`)."""
    return NotFound(f"{kind} {name[:80]!r} not found", code=f"{kind}_not_found")
