"""The in-memory vector index of one collection (reciprocal rank fusion: `retrieval.py`).

Exact (brute-force) cosine search: one pass over the rows' float32 vectors, so recall is 1.0 by
construction and there is nothing to tune. A document filter is applied *inside* the search (only
the rows of the allowed documents are scored), so a filtered query returns k hits whenever k
candidates exist, never fewer because the filter came after the cut.

Why this shape (measured with `bench/scripts/vector_micro.py`, bench/results/*-vector-micro.md):

- The scan is bound by memory bandwidth: 100k x 256 float32 is 102 MB, about 4 ms of one core.
  It runs in numpy's own single-threaded `einsum`, not BLAS's `matmul`: OpenBLAS splits a
  matrix-vector product over its threads, which spin while they wait, so each query cost 40%
  more CPU and, on a machine whose cores were busy, its p95 grew 5-7x (the threads wait for each
  other's turn on a core). One query per core is the parallelism a server wants anyway.
- Fewer bytes per vector did not pay here: numpy has no fast int8 or float16 dot product (the
  int8 product or the int8 -> float32 cast costs as much as reading float32; float16 is 10x
  slower), so a quantised first pass would add memory for no speed; and an approximate index
  (IVF, a projection to fewer dimensions, sign bits) loses recall on vectors without structure.
- A filter that keeps few rows gathers and scores just those (a fifth of the rows or fewer: the
  gather costs about what scanning them all does at that share); else every row is scored and
  the allowed ones taken.
- The scores go to a buffer kept by the index, the top k is an `argpartition` (no sort of the
  whole collection), and ties with the k-th score are all kept and ordered by chunk id, so the
  answer does not depend on how the partition fell.

Not thread-safe (the score buffer, appends): the cache (`agentos.knowledge.indexes`) searches and
changes an index under the entry's lock, or on the event loop only.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np

_INITIAL_ROWS = 64
_GROWTH = 1.25  # capacity grows by a quarter: amortised O(1) per row, at most 25% unused
_GATHER_SHARE = 5  # a filter keeping at most 1/5 of the rows scores only those
_GATHER_ROWS = 2048  # rows gathered at a time (2 MB at 256 dimensions: stays in cache)
_KEPT_FILTERS = 16  # the rows of this many document sets are kept until the rows change


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
        # each row's document as a code into `_documents`: a filter is one table lookup per row
        self._codes = np.zeros(0, dtype=np.int32)
        self._scores = np.zeros(0, dtype=np.float32)  # a search's scores: no allocation per query
        self._documents: list[str] = []
        self._code_of: dict[str, int] = {}
        # rows per filter: the cache hands the same frozenset for a repeated filter (its hash is
        # kept by the set), so a repeated filter skips the per-document lookups (~1 ms at 1500)
        self._rows_kept: dict[frozenset[str], np.ndarray] = {}
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
        """Memory held by the vectors, ids and score buffer (capacity included)."""
        arrays = (self._vectors, self._chunk_ids, self._codes, self._scores)
        return int(sum(a.nbytes for a in arrays))

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
        self._vectors[rows] = vectors
        _normalise(self._vectors[rows])
        self._chunk_ids[rows] = ids
        self._codes[rows] = [self._code(document_id) for document_id in document_ids]
        self._rows_kept.clear()
        self._size += n
        self._last_chunk_id = int(ids[-1])

    def search(self, query: np.ndarray, k: int, documents: Collection[str] | None = None) -> list[tuple[int, float]]:
        """The `k` nearest chunks to `query` (normalised here), best first, ties by chunk id; with
        `documents`, only chunks of those documents are candidates (a mask inside the search, not
        a filter after the top k)."""
        vector = np.asarray(query, dtype=np.float32).reshape(-1)
        if vector.shape[0] != self.dimensions:
            raise ValueError(f"search: a query of {vector.shape[0]} dimensions in an index of {self.dimensions}")
        if k <= 0 or self._size == 0:
            return []
        vector = _normalise(vector[None, :].copy())[0]
        if documents is None:
            return self._best(self._scan(vector), None, k)
        rows = self._rows_of(documents)
        if rows.shape[0] == 0:
            return []
        if rows.shape[0] * _GATHER_SHARE > self._size:
            return self._best(self._scan(vector)[rows], rows, k)
        return self._best(self._scan_rows(vector, rows), rows, k)

    def _scan(self, vector: np.ndarray) -> np.ndarray:
        """Every row's score (a view of the index's buffer, valid until the next search)."""
        scores = self._scores[: self._size]
        np.einsum("ij,j->i", self._vectors[: self._size], vector, out=scores)
        return scores

    def _scan_rows(self, vector: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """The scores of `rows` alone, gathered a block at a time."""
        scores = self._scores[: rows.shape[0]]
        for start in range(0, rows.shape[0], _GATHER_ROWS):
            block = rows[start : start + _GATHER_ROWS]
            np.einsum("ij,j->i", self._vectors[block], vector, out=scores[start : start + block.shape[0]])
        return scores

    def _rows_of(self, documents: Collection[str]) -> np.ndarray:
        """The rows of these documents, in order."""
        key = documents if isinstance(documents, frozenset) else None
        rows = self._rows_kept.get(key) if key is not None else None
        if rows is None:
            allowed = np.zeros(len(self._documents), dtype=bool)
            allowed[self._codes_of(documents)] = True
            rows = np.flatnonzero(allowed[self._codes[: self._size]])
            if key is not None:
                if len(self._rows_kept) >= _KEPT_FILTERS:
                    self._rows_kept.clear()
                self._rows_kept[key] = rows
        return rows

    def _best(self, scores: np.ndarray, rows: np.ndarray | None, k: int) -> list[tuple[int, float]]:
        """The best `k` of `scores` (of `rows`, or of every row when None) as (chunk id, score)."""
        n = scores.shape[0]
        k = min(k, n)
        top = np.argpartition(scores, n - k)[n - k :] if k < n else np.arange(n)
        # rows tied with the k-th best may lie past the partition: take them all, order by chunk id
        top = np.flatnonzero(scores >= scores[top].min())
        found = top if rows is None else rows[top]
        chunk_ids, best = self._chunk_ids[found], scores[top]
        order = np.lexsort((chunk_ids, -best))[:k]
        return [(int(chunk_ids[i]), float(best[i])) for i in order]

    def remove_documents(self, document_ids: Collection[str]) -> int:
        """Drop the rows of these documents (the rest move up, in order); how many were dropped."""
        codes = self._codes_of(document_ids)
        if self._size == 0 or codes.size == 0:
            return 0
        keep = ~np.isin(self._codes[: self._size], codes)
        kept = int(np.count_nonzero(keep))
        dropped = self._size - kept
        if dropped:
            self._rows_kept.clear()
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
        return np.asarray(codes, dtype=np.int64)

    def _reserve(self, rows: int) -> None:
        """Room for `rows` rows: exactly that many for a first load (a collection loaded at its
        first query), else growing by `_GROWTH`."""
        capacity = self._vectors.shape[0]
        if rows <= capacity:
            return
        new_capacity = rows if self._size == 0 else max(rows, int(capacity * _GROWTH), _INITIAL_ROWS)
        vectors = np.empty((new_capacity, self.dimensions), dtype=np.float32)
        vectors[: self._size] = self._vectors[: self._size]
        chunk_ids = np.zeros(new_capacity, dtype=np.int64)
        chunk_ids[: self._size] = self._chunk_ids[: self._size]
        codes = np.zeros(new_capacity, dtype=np.int32)
        codes[: self._size] = self._codes[: self._size]
        self._vectors, self._chunk_ids, self._codes = vectors, chunk_ids, codes
        self._scores = np.zeros(new_capacity, dtype=np.float32)


def _normalise(vectors: np.ndarray) -> np.ndarray:
    """Scale the rows to unit length in place, a block at a time (no temporary the size of the
    matrix); a zero row stays zero: it matches nothing. Returns `vectors`."""
    for start in range(0, vectors.shape[0], _GATHER_ROWS):
        block = vectors[start : start + _GATHER_ROWS]
        norms = np.sqrt(np.einsum("ij,ij->i", block, block))
        np.divide(block, norms[:, None], out=block, where=norms[:, None] > 0)
    return vectors
