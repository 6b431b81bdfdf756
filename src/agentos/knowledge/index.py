"""The in-memory vector index of one collection, and reciprocal rank fusion.

Exact (brute-force) cosine search: one matrix product over the filled rows. That is fast enough
for the collections this serves (about 10^5 chunks: 100k x 256 float32 is 100 MB and one query
is a few milliseconds) and has no recall to tune. A document filter is applied *inside* the
search (the other rows score -inf before the top k is taken), so a filtered query returns k hits
whenever k candidates exist, never fewer because the filter came after the cut."""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np

RRF_K = 60  # the constant of Cormack et al. (2009)

_INITIAL_ROWS = 64


class VectorIndex:
    """Exact cosine search over a float32 matrix (rows L2-normalised), grown by appends.

    Usage::

        index = VectorIndex(256)
        index.add([1, 2], ["doc_a", "doc_a"], vectors)   # vectors: float32 (2, 256)
        index.search(query, k=10, documents={"doc_a"})   # [(chunk_id, cosine), ...] best first
    """

    def __init__(self, dimensions: int) -> None:
        if dimensions < 1:
            raise ValueError("dimensions must be at least 1")
        self.dimensions = dimensions
        self._vectors = np.zeros((0, dimensions), dtype=np.float32)
        self._chunk_ids = np.zeros(0, dtype=np.int64)
        # each row's document as a code into `_documents`: a mask is one np.isin over int32
        self._codes = np.zeros(0, dtype=np.int32)
        self._documents: list[str] = []
        self._code_of: dict[str, int] = {}
        self._size = 0
        self._last_chunk_id = 0

    @property
    def last_chunk_id(self) -> int:
        """The highest chunk id added (0 when empty)."""
        return self._last_chunk_id

    def __len__(self) -> int:
        return self._size

    @property
    def nbytes(self) -> int:
        """Memory held by the vectors and ids."""
        return int(self._vectors.nbytes + self._chunk_ids.nbytes + self._codes.nbytes)

    def add(self, chunk_ids: Sequence[int], document_ids: Sequence[str], vectors: np.ndarray) -> None:
        """Append (chunk ids increasing, above `last_chunk_id`)."""
        vectors = np.asarray(vectors, dtype=np.float32)
        n = len(chunk_ids)
        if vectors.shape != (n, self.dimensions) or len(document_ids) != n:
            raise ValueError(
                f"add: {n} chunk ids, {len(document_ids)} document ids and vectors of shape {vectors.shape}"
                f" (expected ({n}, {self.dimensions}))"
            )
        if n == 0:
            return
        ids = np.asarray(chunk_ids, dtype=np.int64)
        if ids[0] <= self._last_chunk_id or (n > 1 and bool(np.any(np.diff(ids) <= 0))):
            raise ValueError("add: chunk ids must increase, above the last one added")
        self._reserve(self._size + n)
        rows = slice(self._size, self._size + n)
        self._vectors[rows] = _normalised(vectors)
        self._chunk_ids[rows] = ids
        self._codes[rows] = [self._code(document_id) for document_id in document_ids]
        self._size += n
        self._last_chunk_id = int(ids[-1])

    def search(self, query: np.ndarray, k: int, documents: Collection[str] | None = None) -> list[tuple[int, float]]:
        """The `k` nearest chunks to `query` (normalised here), best first; with `documents`, only
        chunks of those documents are candidates (a mask inside the search, not a filter after
        the top k)."""
        vector = np.asarray(query, dtype=np.float32).reshape(-1)
        if vector.shape[0] != self.dimensions:
            raise ValueError(f"search: a query of {vector.shape[0]} dimensions in an index of {self.dimensions}")
        if k <= 0 or self._size == 0:
            return []
        scores = self._vectors[: self._size] @ _normalised(vector[None, :])[0]
        candidates = self._size
        if documents is not None:
            mask = np.isin(self._codes[: self._size], self._codes_of(documents))
            candidates = int(np.count_nonzero(mask))
            scores[~mask] = -np.inf
        k = min(k, candidates)
        if k == 0:
            return []
        top = np.argpartition(-scores, k - 1)[:k] if k < self._size else np.arange(self._size)
        # best first; equal scores by chunk id, so the order does not depend on the partition
        order = np.lexsort((self._chunk_ids[top], -scores[top]))
        best = top[order][:k]
        return [(int(self._chunk_ids[row]), float(scores[row])) for row in best]

    def remove_documents(self, document_ids: Collection[str]) -> int:
        """Drop the rows of these documents (the rest move up, in order); how many were dropped."""
        codes = self._codes_of(document_ids)
        if self._size == 0 or codes.size == 0:
            return 0
        keep = ~np.isin(self._codes[: self._size], codes)
        kept = int(np.count_nonzero(keep))
        dropped = self._size - kept
        if dropped:
            self._vectors[:kept] = self._vectors[: self._size][keep]
            self._chunk_ids[:kept] = self._chunk_ids[: self._size][keep]
            self._codes[:kept] = self._codes[: self._size][keep]
            self._size = kept
        for document_id in document_ids:
            # the code stays allotted (rows may never reuse it wrongly); only the lookup goes
            self._code_of.pop(document_id, None)
        return dropped

    def _code(self, document_id: str) -> int:
        code = self._code_of.get(document_id)
        if code is None:
            code = self._code_of[document_id] = len(self._documents)
            self._documents.append(document_id)
        return code

    def _codes_of(self, document_ids: Collection[str]) -> np.ndarray:
        codes = [self._code_of[d] for d in document_ids if d in self._code_of]
        return np.asarray(codes, dtype=np.int32)

    def _reserve(self, rows: int) -> None:
        """Room for `rows` rows, doubling (amortised O(1) per appended row)."""
        capacity = self._vectors.shape[0]
        if rows <= capacity:
            return
        new_capacity = max(_INITIAL_ROWS, capacity)
        while new_capacity < rows:
            new_capacity *= 2
        vectors = np.zeros((new_capacity, self.dimensions), dtype=np.float32)
        vectors[: self._size] = self._vectors[: self._size]
        chunk_ids = np.zeros(new_capacity, dtype=np.int64)
        chunk_ids[: self._size] = self._chunk_ids[: self._size]
        codes = np.zeros(new_capacity, dtype=np.int32)
        codes[: self._size] = self._codes[: self._size]
        self._vectors, self._chunk_ids, self._codes = vectors, chunk_ids, codes


def _normalised(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (a zero row stays zero: it matches nothing)."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    scaled: np.ndarray = np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)
    return scaled


def reciprocal_rank_fusion(rankings: Sequence[Sequence[int]], k: int = RRF_K) -> list[tuple[int, float]]:
    """Fuse ranked lists of ids: score(id) = sum over lists of 1 / (k + rank), rank from 1; best
    first, ties by id."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        seen: set[int] = set()  # an id listed twice in one ranking counts at its best rank only
        for rank, item in enumerate(ranking, start=1):
            if item not in seen:
                seen.add(item)
                scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda pair: (-pair[1], pair[0]))
