"""What only the PostgreSQL knowledge storage has to prove: several nodes share the indexing
without claiming a document twice, and a collection's chunk ids commit in id order (an index
that loaded every chunk up to N never misses one numbered below N that commits later)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest

from agentos.config import StoreConfig
from agentos.knowledge.pg_storage import PgKnowledgeStorage
from agentos.knowledge.records import ChunkRow
from agentos.store import pg_migrations, pg_pool
from agentos.testing import eventually
from tests.knowledge.test_storage import collection, document, vec
from tests.postgres import URL


@pytest.fixture
async def nodes(pg: StoreConfig) -> AsyncIterator[tuple[PgKnowledgeStorage, PgKnowledgeStorage]]:
    a, b = PgKnowledgeStorage(pg), PgKnowledgeStorage(pg)
    await a.open()
    await b.open()
    yield a, b
    await a.close()
    await b.close()


async def test_two_nodes_claim_disjoint_documents(nodes: tuple[PgKnowledgeStorage, PgKnowledgeStorage]) -> None:
    a, b = nodes
    col = await a.create_collection(collection(), max_per_tenant=5)
    for i in range(40):
        await a.insert_document(document(col, f"doc_{i:02d}", at=i), b"x", max_documents=100)
    rounds = await asyncio.gather(
        *(node.claim_documents(name, 100, 1000, 7) for name, node in [("a", a), ("b", b)] * 4)
    )
    claimed = [d.document_id for batch in rounds for d, _, _ in batch]
    assert len(claimed) == len(set(claimed)) == 40
    assert await b.claim_documents("c", 100, 1000, 40) == []
    assert await a.pending() == 40


async def test_chunk_ids_of_a_collection_commit_in_order(
    pg: StoreConfig, nodes: tuple[PgKnowledgeStorage, PgKnowledgeStorage]
) -> None:
    a, _ = nodes
    col = await a.create_collection(collection(), max_per_tenant=5)
    await a.insert_document(document(col, "doc_1"), b"x", max_documents=10)
    assert len(await a.claim_documents("w", 100, 1000, 5)) == 1
    other = await asyncpg.connect(URL, server_settings={"search_path": pg.postgres_schema})
    watch = await asyncpg.connect(URL)
    try:
        # Another transaction of this collection is in flight (it holds the lock save_chunks takes)
        # and draws a chunk id that it has not committed yet.
        tx = other.transaction()
        await tx.start()
        await other.execute(
            "SELECT 1 FROM knowledge_collections WHERE collection_id = $1 FOR NO KEY UPDATE", col.collection_id
        )
        save = asyncio.create_task(a.save_chunks("w", "doc_1", [ChunkRow(0, "doc_1", 0, "late", vec(1, 0))], 200))
        await eventually(lambda: _blocked_on_a_lock(watch), 10, "save_chunks waiting on the collection lock")
        in_flight = await other.fetchval("SELECT nextval(pg_get_serial_sequence('knowledge_chunks', 'chunk_id'))")
        assert not save.done()
        await tx.commit()
        assert await asyncio.wait_for(save, 10)
    finally:
        await other.close()
        await watch.close()
    ids, _, _ = await a.vectors_after(col.collection_id, 0)
    assert len(ids) == 1 and ids[0] > in_flight  # drawn after the earlier transaction committed


async def _blocked_on_a_lock(watch: asyncpg.Connection) -> bool:
    """Whether a backend (save_chunks) waits on the collection's row lock. `watch` is outside
    any transaction: inside one, pg_stat_activity would show the same snapshot every time."""
    return bool(
        await watch.fetchval(
            "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            " AND query LIKE '%knowledge_collections%FOR NO KEY UPDATE%')"
        )
    )


async def test_migration_0010_drops_the_chunks_full_text_vectors(pg: StoreConfig) -> None:
    """A database migrated up to 0009 (chunks with 0006's generated `tsvector` and GIN index)
    loses both when the storage opens, and keeps its chunks."""
    conn = await pg_pool.connect(pg)
    try:
        upto_0009 = [m for m in pg_migrations.shipped() if m.version < 10]
        await pg_migrations.migrate(conn, upto_0009, schema=pg.postgres_schema)
        await conn.execute(
            "INSERT INTO knowledge_collections (collection_id, tenant_id, name, model, dims, chunk_tokens,"
            " chunk_overlap, created_ms) VALUES ('col_acme_docs', 'acme', 'docs', 'm', 2, 100, 10, 1)"
        )
        await conn.execute(
            "INSERT INTO knowledge_documents (document_id, tenant_id, collection_id, title, content_type, size_bytes,"
            " sha256, metadata, status, created_ms, updated_ms) VALUES ('doc_1', 'acme', 'col_acme_docs', 't',"
            " 'text/plain', 1, '0', '{}', 'ready', 1, 1)"
        )
        await conn.execute(
            "INSERT INTO knowledge_chunks (collection_id, document_id, ordinal, text, vector)"
            " VALUES ('col_acme_docs', 'doc_1', 0, 'kafka lag', '')"
        )
        assert await conn.fetchval("SELECT tsv::text FROM knowledge_chunks") == "'kafka':1 'lag':2"
        storage = PgKnowledgeStorage(pg)
        await storage.open()
        try:
            assert (await storage.chunks_after("col_acme_docs", 0)).texts == ["kafka lag"]
            col = await storage.get_collection("acme", "docs")
            assert col is not None
            await storage.insert_document(document(col, "doc_2"), b"x", max_documents=10)
            assert [d.document_id for d, _, _ in await storage.claim_documents("w", 100, 1000, 5)] == ["doc_2"]
            assert await storage.save_chunks("w", "doc_2", [ChunkRow(0, "doc_2", 0, "vacuum", vec(1, 1))], 200)
            assert (await storage.chunks_after("col_acme_docs", 0)).texts == ["kafka lag", "vacuum"]
        finally:
            await storage.close()
        columns = {
            r[0]
            for r in await conn.fetch(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = $1"
                " AND table_name = 'knowledge_chunks'",
                pg.postgres_schema,
            )
        }
        assert "tsv" not in columns and "text" in columns
        assert await conn.fetchval("SELECT to_regclass('knowledge_chunks_tsv')") is None
    finally:
        await conn.close()
