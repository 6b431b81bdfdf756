"""The index cache over a real `knowledge.db`: what it reads as a collection grows, and the
documents a filter allows, kept per filter until the documents change."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentos.knowledge import filters
from agentos.knowledge.index import VectorIndex
from agentos.knowledge.indexes import IndexCache, IndexEntry, allowed
from agentos.knowledge.sqlite_storage import SqliteKnowledgeStorage
from tests.knowledge.test_storage import collection, indexed


@pytest.fixture
async def storage(tmp_path: Path) -> AsyncIterator[SqliteKnowledgeStorage]:
    s = SqliteKnowledgeStorage(tmp_path / "knowledge.db")
    await s.open()
    yield s
    await s.close()


async def test_new_documents_are_read_with_their_chunks_and_filters_follow(storage: SqliteKnowledgeStorage) -> None:
    col = await storage.create_collection(collection(), max_per_tenant=5)
    cache = IndexCache(storage, idle_s=600)
    await indexed(storage, col, "doc_1", ["alpha"], team="a")
    entry = await cache.current(col)
    team_a = filters.parse_filter({"team": "a"})
    assert set(entry.documents) == {"doc_1"} and allowed(entry, team_a) == {"doc_1"}
    await indexed(storage, col, "doc_2", ["beta"], team="a")
    cache.invalidate(col.collection_id)  # ask the store now, not after FRESH_S
    entry = await cache.current(col)
    assert entry.documents["doc_2"] == ("title doc_2", {"team": "a"})
    assert allowed(entry, team_a) == {"doc_1", "doc_2"}  # the new document counts for a kept filter
    assert len(entry.index) == 2
    assert await storage.delete_document("acme", col.collection_id, "doc_1")
    cache.invalidate(col.collection_id)
    entry = await cache.current(col)
    assert set(entry.documents) == {"doc_2"} and allowed(entry, team_a) == {"doc_2"}
    assert len(entry.index) == 1


def test_allowed_keeps_filters_apart_by_type() -> None:
    entry = IndexEntry("col", VectorIndex(2))
    entry.documents = {"d_true": ("", {"f": True}), "d_one": ("", {"f": 1}), "d_float": ("", {"f": 1.0})}
    assert allowed(entry, filters.parse_filter({"f": True})) == {"d_true"}
    assert allowed(entry, filters.parse_filter({"f": 1})) == {"d_one", "d_float"}  # True == 1 in Python, not here
    assert allowed(entry, filters.parse_filter({"f": True})) == {"d_true"}
    assert allowed(entry, filters.parse_filter({"f": "1"})) == frozenset()


async def test_the_full_text_index_is_rebuilt_from_the_file_after_a_restart(tmp_path: Path) -> None:
    """Nothing of the full-text index is saved: a new process rebuilds it from `knowledge.db`,
    with the same ranking, and without what was deleted before the restart."""
    path = tmp_path / "knowledge.db"
    first = SqliteKnowledgeStorage(path)
    await first.open()
    col = await first.create_collection(collection(), max_per_tenant=5)
    await indexed(first, col, "doc_1", ["kafka lag", "kafka kafka consumer"], team="a")
    await indexed(first, col, "doc_2", ["consumer lag", "vacuum"], team="b")
    await indexed(first, col, "doc_3", ["kafka"], team="b")
    ids, _, _ = await first.vectors_after(col.collection_id, 0)
    cache = IndexCache(first, idle_s=600)
    entry = await cache.current(col)
    assert {c for c, _ in await cache.search_text(entry, ["kafka", "lag"], 10, None)} == {*ids[:3], ids[4]}
    assert await first.delete_document("acme", col.collection_id, "doc_3")
    cache.invalidate(col.collection_id)
    entry = await cache.current(col)
    after_delete = await cache.search_text(entry, ["kafka", "lag"], 10, None)
    assert {c for c, _ in after_delete} == set(ids[:3])
    await first.close()

    second = SqliteKnowledgeStorage(path)
    await second.open()
    try:
        entry = await IndexCache(second, idle_s=600).current(col)
        assert entry.text.search(["kafka", "lag"], 10) == after_delete  # same chunks, same scores
        team_b = allowed(entry, filters.parse_filter({"team": "b"}))
        assert [c for c, _ in entry.text.search(["kafka", "lag"], 10, team_b)] == [ids[2]]
    finally:
        await second.close()
