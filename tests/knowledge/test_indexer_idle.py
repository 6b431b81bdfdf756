"""An idle indexer looks at the store less and less often (`waiting.IdlePoll`, tested in
tests/test_waiting.py), on a real store; but never later than the end of a lease it saw."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentos.config import KnowledgeConfig, Settings
from agentos.knowledge.embeddings import Embedder
from agentos.knowledge.indexer import IDLE_POLL_MAX_S, POLL_S, Indexer
from agentos.knowledge.records import Collection, DocumentRow
from agentos.knowledge.sqlite_storage import SqliteKnowledgeStorage


@pytest.fixture
async def indexer(tmp_path: Path) -> AsyncIterator[Indexer]:
    storage = SqliteKnowledgeStorage(tmp_path / "knowledge.db")
    await storage.open()
    embedder = Embedder(Settings())
    yield Indexer(KnowledgeConfig(), storage, embedder, lambda: 1_000, embedded=True)
    await embedder.aclose()
    await storage.close()


async def test_each_empty_look_doubles_the_wait_up_to_the_cap_and_an_add_resets_it(indexer: Indexer) -> None:
    waits = []
    for _ in range(7):
        assert await indexer._claim() is None  # the empty store: nothing to index
        waits.append(indexer._poll.current_s)
    assert waits == [
        2 * POLL_S,
        4 * POLL_S,
        8 * POLL_S,
        IDLE_POLL_MAX_S,
        IDLE_POLL_MAX_S,
        IDLE_POLL_MAX_S,
        IDLE_POLL_MAX_S,
    ]
    indexer.wake()  # a document added on this node
    assert indexer._poll.current_s == POLL_S


async def test_a_dead_nodes_lease_bounds_the_idle_wait_on_a_shared_store(tmp_path: Path) -> None:
    """On a store other nodes share (`embedded=False`), a document another node claimed and
    never finished (it died) is looked at again just after its lease ends, however far the
    idle workers have backed off: not up to IDLE_POLL_MAX_S later."""
    storage = SqliteKnowledgeStorage(tmp_path / "knowledge.db")
    await storage.open()
    embedder = Embedder(Settings())
    now = [1_000]
    indexer = Indexer(KnowledgeConfig(lease_s=60.0), storage, embedder, lambda: now[0], embedded=False)
    try:
        col = await storage.create_collection(Collection("col_1", "acme", "docs", "m", 2, 100, 10, 1), max_per_tenant=5)
        row = DocumentRow("doc_1", "acme", col.collection_id, "t", "text/plain", 3, "ab" * 32, {}, "queued", 1, 1)
        await storage.insert_document(row, b"one", max_documents=10)
        await storage.claim_documents("dead-node", 1_000, 60_000, 1)  # its node died after the claim
        now[0] = 50_000
        for _ in range(6):
            assert await indexer._claim() is None
        assert indexer._poll.current_s == IDLE_POLL_MAX_S  # backed off all the way ...
        assert indexer._poll.wait_s(now[0]) == (61_001 - 50_000) / 1000  # ... but looks again at the lease's end
        now[0] = 61_001
        job = await indexer._claim()
        assert job is not None and job[0].document_id == "doc_1" and job[0].attempts == 2
    finally:
        await embedder.aclose()
        await storage.close()
