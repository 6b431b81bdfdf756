"""The vector index against a float64 brute force, masks inside the search, removal, growth."""

from __future__ import annotations

import numpy as np
import pytest

from agentos.knowledge.index import VectorIndex
from agentos.knowledge.retrieval import RRF_K, reciprocal_rank_fusion


def random_index(rows: int, dims: int, documents: int, seed: int = 0) -> tuple[VectorIndex, np.ndarray, list[str]]:
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((rows, dims)).astype(np.float32)
    owners = [f"doc_{i % documents}" for i in range(rows)]
    index = VectorIndex(dims)
    # appended in several batches, past the initial capacity
    for start in range(0, rows, 37):
        end = min(rows, start + 37)
        index.add(list(range(start + 1, end + 1)), owners[start:end], vectors[start:end])
    return index, vectors, owners


def brute_force(
    vectors: np.ndarray, query: np.ndarray, k: int, allowed: np.ndarray | None = None
) -> list[tuple[int, float]]:
    v = vectors.astype(np.float64)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    q = query.astype(np.float64) / np.linalg.norm(query)
    scores = v @ q
    rows = np.arange(len(v)) if allowed is None else np.flatnonzero(allowed)
    best = rows[np.lexsort((rows, -scores[rows]))][:k]  # by score, then by row
    return [(int(r) + 1, float(scores[r])) for r in best]


def assert_same(got: list[tuple[int, float]], expected: list[tuple[int, float]]) -> None:
    assert [c for c, _ in got] == [c for c, _ in expected]
    assert np.allclose([s for _, s in got], [s for _, s in expected], atol=1e-5)


def test_search_equals_a_float64_brute_force() -> None:
    index, vectors, _ = random_index(500, 32, 7)
    rng = np.random.default_rng(1)
    for k in range(1, 51):
        query = rng.standard_normal(32).astype(np.float32) * 3.0  # not normalised: the index does it
        got = index.search(query, k)
        assert_same(got, brute_force(vectors, query, k))
        assert all(isinstance(c, int) and isinstance(s, float) for c, s in got)


def test_a_document_mask_is_applied_inside_the_search() -> None:
    index, vectors, owners = random_index(300, 16, 10)
    rng = np.random.default_rng(2)
    wanted = {"doc_3", "doc_7", "doc_missing"}
    allowed = np.array([owner in wanted for owner in owners])
    for k in (1, 5, 25, 60, 100):
        query = rng.standard_normal(16).astype(np.float32)
        got = index.search(query, k, documents=wanted)
        # k hits whenever k candidates exist (60 rows belong to doc_3 and doc_7)
        assert len(got) == min(k, 60)
        assert_same(got, brute_force(vectors, query, k, allowed))
    assert index.search(rng.standard_normal(16), 5, documents=set()) == []
    assert index.search(rng.standard_normal(16), 5, documents={"doc_missing"}) == []


def test_k_larger_than_the_index_returns_every_row() -> None:
    index, vectors, _ = random_index(10, 8, 2)
    query = np.ones(8, dtype=np.float32)
    got = index.search(query, 100)
    assert len(got) == 10
    assert_same(got, brute_force(vectors, query, 100))
    assert index.search(query, 0) == []


def test_empty_index() -> None:
    index = VectorIndex(4)
    assert len(index) == 0 and index.last_chunk_id == 0
    assert index.search(np.ones(4), 5) == []
    assert index.search(np.ones(4), 5, documents={"d"}) == []
    assert index.remove_documents({"d"}) == 0
    index.add([], [], np.zeros((0, 4), dtype=np.float32))
    assert len(index) == 0


ROW_BYTES = 8 * 4 + 8 + 4 + 4  # 8 float32 dimensions, the chunk id, the document code, the score


def test_growth_keeps_every_row() -> None:
    index, vectors, _ = random_index(1000, 8, 3)
    assert len(index) == 1000 and index.last_chunk_id == 1000
    # grown by a quarter at a time: at most 25% unused (plus the last batch)
    assert index.nbytes <= (1.25 * 1000 + 37) * ROW_BYTES
    for row in (0, 499, 999):
        assert index.search(vectors[row], 1)[0][0] == row + 1


def test_a_first_load_takes_exactly_its_rows() -> None:
    vectors = np.random.default_rng(4).standard_normal((1000, 8)).astype(np.float32)
    index = VectorIndex(8)
    index.add(list(range(1, 1001)), ["d"] * 1000, vectors)
    assert index.nbytes == 1000 * ROW_BYTES
    index.add([1001], ["d"], vectors[:1])
    assert index.nbytes == 1250 * ROW_BYTES


def test_removing_documents_compacts_and_keeps_order() -> None:
    index, vectors, owners = random_index(200, 8, 4)
    assert index.remove_documents({"doc_1", "doc_2", "nope"}) == 100
    assert len(index) == 100
    allowed = np.array([owner not in ("doc_1", "doc_2") for owner in owners])
    query = np.random.default_rng(3).standard_normal(8).astype(np.float32)
    assert_same(index.search(query, 200), brute_force(vectors, query, 200, allowed))
    assert index.search(query, 5, documents={"doc_1"}) == []
    # a removed document's id may come back with new chunks
    index.add([201], ["doc_1"], vectors[:1])
    [(chunk, score)] = index.search(vectors[0], 1, documents={"doc_1"})
    assert chunk == 201 and score == pytest.approx(1.0, abs=1e-5)
    assert index.last_chunk_id == 201


def test_bad_additions_and_queries_are_refused() -> None:
    index = VectorIndex(4)
    index.add([5], ["d"], np.ones((1, 4), dtype=np.float32))
    with pytest.raises(ValueError):
        index.add([5], ["d"], np.ones((1, 4), dtype=np.float32))  # not above the last id
    with pytest.raises(ValueError):
        index.add([7, 6], ["d", "d"], np.ones((2, 4), dtype=np.float32))  # not increasing
    with pytest.raises(ValueError):
        index.add([8], ["d"], np.ones((1, 3), dtype=np.float32))  # wrong size
    with pytest.raises(ValueError):
        index.search(np.ones(5), 1)
    assert len(index) == 1


def test_a_zero_vector_matches_nothing_strongly() -> None:
    index = VectorIndex(3)
    index.add([1, 2], ["a", "a"], np.array([[0, 0, 0], [1, 0, 0]], dtype=np.float32))
    assert index.search(np.array([1, 0, 0]), 2) == [(2, pytest.approx(1.0)), (1, 0.0)]
    assert [c for c, _ in index.search(np.zeros(3), 2)] == [1, 2]  # all score 0: by chunk id


def test_reciprocal_rank_fusion() -> None:
    fused = reciprocal_rank_fusion([[1, 2, 3], [3, 1, 4]])
    assert [item for item, _ in fused] == [1, 3, 2, 4]
    assert fused[0][1] == pytest.approx(1 / (RRF_K + 1) + 1 / (RRF_K + 2))
    assert reciprocal_rank_fusion([]) == []
    assert reciprocal_rank_fusion([[5], [6]]) == [(5, 1 / 61), (6, 1 / 61)]  # ties by id
    assert reciprocal_rank_fusion([[1, 1, 2]]) == [(1, 1 / 61), (2, 1 / 63)]  # a repeat counts once


def test_filters_of_every_share_match_a_brute_force() -> None:
    """A filter keeping few rows scores only those (gathered in blocks of 2048); one keeping many
    scores every row: both give the brute force's answer, and only allowed chunks."""
    index, vectors, owners = random_index(30_000, 16, 10, seed=5)
    rng = np.random.default_rng(6)
    for wanted in ({"doc_2"}, {"doc_1", "doc_4"}, {f"doc_{i}" for i in range(7)}):  # 3000, 6000, 21000 rows
        allowed = np.array([owner in wanted for owner in owners])
        for k in (1, 10, 40):
            query = rng.standard_normal(16).astype(np.float32)
            got = index.search(query, k, documents=wanted)
            assert_same(got, brute_force(vectors, query, k, allowed))
            assert all(allowed[chunk_id - 1] for chunk_id, _ in got)


def test_ties_with_the_kth_score_are_ordered_by_chunk_id() -> None:
    index = VectorIndex(2)
    rows = np.array([[1, 0]] * 50 + [[0, 1]] * 50, dtype=np.float32)
    index.add(list(range(1, 101)), ["a", "b"] * 50, rows)
    assert [c for c, _ in index.search(np.array([1, 0]), 5)] == [1, 2, 3, 4, 5]
    assert [c for c, _ in index.search(np.array([0, 1]), 3, documents={"b"})] == [52, 54, 56]


@pytest.mark.parametrize("kind", ["random", "mock embeddings"])
def test_recall_at_10_against_exact_search_is_one(kind: str) -> None:
    """The bench's yardstick (`agentos_bench.knowledge.metrics`) on the bench's two kinds of
    vectors, unfiltered and filtered: an exact index finds the exact top 10."""
    from agentos.mock.embeddings import embed_texts
    from agentos_bench.knowledge.metrics import exact_top_k, recall_at_k, unit_rows

    rng = np.random.default_rng(7)
    if kind == "random":
        vectors = rng.standard_normal((5000, 64)).astype(np.float32)
        queries = rng.standard_normal((20, 64)).astype(np.float32)
    else:
        words = [f"w{i}" for i in range(300)]
        texts = [" ".join(rng.choice(words, 40)) for _ in range(5000)]
        vectors = embed_texts(texts, "m", 64).astype(np.float32)
        queries = embed_texts([" ".join(t.split()[:8]) for t in texts[:20]], "m", 64).astype(np.float32)
    owners = [f"doc_{i // 10}" for i in range(5000)]
    index = VectorIndex(64)
    index.add(list(range(1, 5001)), owners, vectors)
    unit, ids = unit_rows(vectors), np.arange(1, 5001)
    allowed = {f"doc_{i}" for i in range(0, 500, 10)}
    mask = np.array([owner in allowed for owner in owners])
    for documents, candidates in ((None, None), (allowed, mask)):
        for q in queries:
            found = [c for c, _ in index.search(q, 40, documents)][:10]
            assert recall_at_k(found, exact_top_k(unit, ids, q, 10, candidates), 10) == 1.0


def test_a_repeated_filter_follows_appends_and_removals() -> None:
    """The rows of a filter (the cache hands the same frozenset again) are kept only until the
    rows change."""
    index = VectorIndex(2)
    wanted = frozenset({"a"})
    east = np.array([[1.0, 0.0]], dtype=np.float32)

    def found() -> list[int]:
        return [chunk_id for chunk_id, _ in index.search(east[0], 10, wanted)]

    index.add([1, 2], ["a", "b"], np.repeat(east, 2, axis=0))
    assert found() == [1] and found() == [1]
    index.add([3, 4], ["b", "a"], np.repeat(east, 2, axis=0))
    assert found() == [1, 4]
    index.remove_documents({"a"})
    assert found() == []
    index.add([5], ["a"], east)
    assert found() == [5]
