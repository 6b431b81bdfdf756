"""The full-text micro-bench's relevance check: SQLite's exhaustive bm25 as the reference, ties with the kth
counted as found, and the in-memory index agreeing with it on chunks of one length (where
FTS5's row length, which also counts the collection id's tokens, orders rows as ours does)."""

from __future__ import annotations

import random
from pathlib import Path

from tests.knowledge.test_storage import collection, indexed

from agentos.knowledge.sqlite_storage import SqliteKnowledgeStorage
from agentos.knowledge.text_index import TextIndex
from agentos.knowledge.words import query_terms
from agentos_bench.micro.fts_relevance import exhaustive_bm25, recall, reference_db

WORDS = [f"w{i}" for i in range(30)]


def test_recall_counts_ties_with_the_kth_as_found() -> None:
    truth = [(1, 3.0), (2, 2.0), (3, 1.0), (4, 1.0)]  # k = 3: chunk 3 or 4 may be third
    assert recall(truth, [1, 2, 4], k=3) == 1.0
    assert recall(truth, [1, 4, 9], k=3) == 2 / 3
    assert recall([], [1], k=3) == 1.0
    assert recall([(7, 1.0)], [], k=3) == 0.0


async def test_the_in_memory_index_finds_sqlite_s_exhaustive_top_10(tmp_path: Path) -> None:
    rng = random.Random(3)
    storage = SqliteKnowledgeStorage(tmp_path / "knowledge.db")
    await storage.open()
    try:
        col = await storage.create_collection(collection(), max_per_tenant=5)
        for d in range(12):  # chunks of 8 words each: one length
            texts = [" ".join(rng.choices(WORDS, weights=range(30, 0, -1), k=8)) for _ in range(10)]
            await indexed(storage, col, f"doc_{d}", texts, team="a" if d % 3 else "b")
        batch = await storage.chunks_after(col.collection_id, 0)
    finally:
        await storage.close()
    index = TextIndex()
    index.add(batch.chunk_ids, batch.document_ids, batch.texts)
    team_b = {f"doc_{d}" for d in range(0, 12, 3)}
    db = reference_db(tmp_path / "knowledge.db")
    try:
        for q in ["w0 w5", "w1", "w29 w3 w7", "w2 w0 w1 w4", "nothing"]:
            for flt, docs in (({}, None), ({"team": "b"}, team_b)):
                truth = exhaustive_bm25(db, query_terms(q), 10, flt)
                got = index.search(query_terms(q), 10, docs)
                assert recall(truth, [c for c, _ in got]) == 1.0, q
                scores = dict(truth)
                for chunk, score in got:
                    assert abs(scores.get(chunk, score) - score) <= 1e-9 * abs(score), (q, chunk)
    finally:
        db.close()
