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
