"""The query path's reads of `knowledge.db` run on read-only connections beside the writer
(`sqlite_readers`): they see every commit made before they start, and fail cleanly once closed."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentos.errors import StoreUnavailable
from agentos.knowledge.sqlite_storage import SqliteKnowledgeStorage
from tests.knowledge.test_storage import collection, indexed


async def test_a_ready_document_is_searchable_at_once_and_reads_fail_after_close(tmp_path: Path) -> None:
    storage = SqliteKnowledgeStorage(tmp_path / "knowledge.db")
    await storage.open()
    col = await storage.create_collection(collection(), max_per_tenant=5)
    for n in range(5):  # each read right after the write that made the document ready
        await indexed(storage, col, f"doc_{n}", [f"needle{n} hay"])
        ids, _, _ = await storage.vectors_after(col.collection_id, 0)
        assert len(ids) == n + 1
        assert (await storage.chunks_after(col.collection_id, ids[-2] if n else 0)).texts == [f"needle{n} hay"]
        assert set(await storage.document_metadata(col.collection_id)) == {f"doc_{i}" for i in range(n + 1)}
    assert await storage.get_collection("acme", "docs") is not None
    await storage.close()
    with pytest.raises(StoreUnavailable):
        await storage.chunks_after(col.collection_id, 0)


async def test_in_memory_storage_reads_through_its_writer() -> None:
    storage = SqliteKnowledgeStorage(None)
    await storage.open()
    try:
        col = await storage.create_collection(collection(), max_per_tenant=5)
        await indexed(storage, col, "doc_1", ["needle"])
        ids, _, _ = await storage.vectors_after(col.collection_id, 0)
        assert (await storage.chunks_after(col.collection_id, 0)).chunk_ids == ids
    finally:
        await storage.close()
