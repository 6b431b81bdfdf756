"""The vector index against a float64 brute force, masks inside the search, removal, growth."""

from __future__ import annotations

import numpy as np
import pytest

from agentos.knowledge.index import RRF_K, VectorIndex, reciprocal_rank_fusion


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
    best = sorted(rows, key=lambda r: (-scores[r], r))[:k]
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


def test_growth_keeps_every_row() -> None:
    index, vectors, _ = random_index(1000, 8, 3)
    assert len(index) == 1000 and index.last_chunk_id == 1000
    # amortised doubling: capacity at most twice the rows (plus the initial block)
    assert index.nbytes <= 2 * 1000 * (8 * 4 + 8 + 4)
    for row in (0, 499, 999):
        assert index.search(vectors[row], 1)[0][0] == row + 1


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
    assert index.search(vectors[0], 1, documents={"doc_1"}) == [(201, pytest.approx(1.0, abs=1e-5))]
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
