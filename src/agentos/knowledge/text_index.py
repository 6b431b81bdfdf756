"""The in-memory full-text index of one collection: exact BM25 over compressed postings, in numpy.

Why not FTS5 or `tsvector` at query time: a query ORs its words, so a common word matches tens
of thousands of chunks at 10^5, and both engines score each match through their per-row
machinery (bm25 reads each row's length; `ts_rank` each row's `tsvector`): 40-100 ms. Dynamic
pruning (WAND, MaxScore, block-max) would cut the matches scored, but walking postings one by
one is interpreted Python here; scoring *every* match as one vectorised pass over arrays costs
some tens of nanoseconds per posting instead (a query of 176,000 postings: 3.4 ms of CPU on the
bench machine), and it is exhaustive: the top k is exactly BM25's, with no approximation to measure.

Layout. Rows are chunks in the order added (chunk ids increasing). Each batch added becomes a
segment of postings (term id -> rows, term frequencies), merged like a binary counter so a
collection holds O(log n) of them: `agentos.knowledge.postings`.

Deletions mark rows dead; a dead row's postings are skipped (so document frequencies, the row
count and the average length are those of the live rows only, exactly as if the row were never
added), and once a quarter of the rows are dead everything is rewritten without them.

Scoring: FTS5's bm25 (k1 = 1.2, b = 0.75; IDF `log((N - n + 0.5) / (n + 0.5))`, clamped to 1e-6
for a word in half the rows or more, as FTS5 does) over the collection's live chunks: the
statistics are this collection's, not the file's (no other tenant sways them). A filter is a
mask on the candidates, inside the search: a filtered query returns k hits whenever k matching
chunks pass it. Ties by chunk id.

Tokens: `agentos.knowledge.words`.

Not thread-safe: the cache (`agentos.knowledge.indexes`) searches and changes an index under the
entry's lock (or on the event loop only).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence

import numpy as np

from agentos.knowledge.postings import Segment, append_segment, batch_segment, merged
from agentos.knowledge.words import END, batch_tokens

K1 = 1.2
B = 0.75
MIN_IDF = 1e-6  # FTS5's floor for a word in half the rows or more
_COMPACT_SHARE = 4  # rewrite without the dead rows once 1/4 of the rows are dead
_KEPT_FILTERS = 16  # the allowed codes of this many document sets are kept (as VectorIndex keeps rows)


class _Vocabulary(dict[str, int]):
    """Word -> term id; a word looked up for the first time gets the next id (in order of first
    appearance, so the same texts give the same ids), so a batch's words are all looked up in
    one `map` in C, with Python called only for new words."""

    def __missing__(self, word: str) -> int:
        term = self[word] = len(self)
        return term


class TextIndex:
    """Exact BM25 over a collection's chunks, grown by appends.

    Usage::

        index = TextIndex()
        index.add([1, 2], ["doc_a", "doc_b"], ["kafka consumer lag", "postgres vacuum"])
        index.search(["kafka", "lag"], k=10, documents={"doc_a"})   # [(chunk_id, bm25), ...] best first
        index.remove_documents({"doc_a"})
    """

    def __init__(self) -> None:
        self._vocabulary = _Vocabulary()
        self._segments: list[Segment] = []
        self._chunk_ids = np.zeros(0, dtype=np.int64)
        self._lengths = np.zeros(0, dtype=np.int32)
        self._codes = np.zeros(0, dtype=np.int32)  # each row's document, as in VectorIndex
        self._alive = np.zeros(0, dtype=bool)
        self._code_of: dict[str, int] = {}
        self._next_code = 0
        # allowed codes per filter, as VectorIndex keeps rows: the cache hands the same frozenset
        # for a repeated filter, so it skips the per-document lookups (0.25 ms at 2000 documents)
        self._masks: dict[frozenset[str], np.ndarray] = {}
        self._live_rows = 0
        self._live_tokens = 0
        self._last_chunk_id = 0

    @property
    def last_chunk_id(self) -> int:
        return self._last_chunk_id

    def __len__(self) -> int:
        """Live rows."""
        return self._live_rows

    @property
    def nbytes(self) -> int:
        postings = sum(s.rows.nbytes + s.tfs.nbytes + s.terms.nbytes + s.starts.nbytes for s in self._segments)
        rows = self._chunk_ids.nbytes + self._lengths.nbytes + self._codes.nbytes + self._alive.nbytes
        return int(postings + rows)

    def add(self, chunk_ids: Sequence[int], document_ids: Sequence[str], texts: Sequence[str]) -> None:
        """Append (chunk ids increasing, above `last_chunk_id`)."""
        n = len(chunk_ids)
        if len(document_ids) != n or len(texts) != n:
            raise ValueError(f"add: {n} chunk ids, {len(document_ids)} document ids and {len(texts)} texts")
        if n == 0:
            return
        ids = np.asarray(chunk_ids, dtype=np.int64)
        if ids[0] <= self._last_chunk_id or (n > 1 and bool(np.any(np.diff(ids) <= 0))):
            raise ValueError("add: chunk ids must increase, above the last one added")
        first = self._chunk_ids.shape[0]
        term_of, lengths = self._term_ids(texts)
        segment = batch_segment(term_of, lengths, first)
        self._chunk_ids = np.concatenate([self._chunk_ids, ids])
        self._lengths = np.concatenate([self._lengths, lengths])
        self._codes = np.concatenate([self._codes, [self._code(d) for d in document_ids]]).astype(np.int32)
        self._alive = np.concatenate([self._alive, np.ones(n, dtype=bool)])
        self._live_rows += n
        self._live_tokens += int(lengths.sum())
        self._last_chunk_id = int(ids[-1])
        append_segment(self._segments, segment)

    def _term_ids(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(term id of every token, in order; tokens per text): the batch tokenized in one pass
        (`batch_tokens`), every token looked up by one `map` (a loop in C), the texts' ends
        found in the ids (`END` has a term id of its own, which no query word can look up)."""
        words = batch_tokens(texts)
        ids = np.fromiter(map(self._vocabulary.__getitem__, words), dtype=np.int64, count=len(words))
        at_end = ids == self._vocabulary[END]
        lengths = (np.diff(np.flatnonzero(at_end), prepend=-1) - 1).astype(np.int32)
        return ids[~at_end], lengths

    def search(self, terms: Sequence[str], k: int, documents: Collection[str] | None = None) -> list[tuple[int, float]]:
        """The `k` best chunks by BM25 for any of `terms` (`query_terms` output), best first, ties
        by chunk id; with `documents`, only chunks of those documents are candidates."""
        if k <= 0 or self._live_rows == 0:
            return []
        rows, scores = self._scored(terms)
        if rows.shape[0] == 0:
            return []
        total = np.bincount(rows, weights=scores, minlength=self._chunk_ids.shape[0])
        matched = np.zeros(self._chunk_ids.shape[0], dtype=bool)
        matched[rows] = True
        candidates = np.flatnonzero(matched)
        if documents is not None:
            candidates = candidates[self._allowed(documents)[self._codes[candidates]]]
        return self._best(candidates, total[candidates], k)

    def _scored(self, terms: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Every live posting of `terms` with its BM25 contribution, term after term."""
        avgdl = self._live_tokens / self._live_rows
        all_rows, all_scores = [], []
        for word in dict.fromkeys(terms):
            term = self._vocabulary.get(word)
            if term is None:
                continue
            rows, tfs = self._live_postings(term)
            if rows.shape[0] == 0:
                continue
            idf = idf_of(self._live_rows, rows.shape[0])
            tf = tfs.astype(np.float64)
            dl = self._lengths[rows].astype(np.float64)
            # the same operations in the same order as `bm25_term`, so scores are bit for bit equal
            all_scores.append(idf * (tf * (K1 + 1.0)) / (tf + K1 * (1.0 - B + B * dl / avgdl)))
            all_rows.append(rows)
        if not all_rows:
            return np.zeros(0, dtype=np.int32), np.zeros(0)
        return np.concatenate(all_rows), np.concatenate(all_scores)

    def _live_postings(self, term: int) -> tuple[np.ndarray, np.ndarray]:
        found = [p for p in (s.postings(term) for s in self._segments) if p is not None]
        if not found:
            return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.uint16)
        rows = np.concatenate([p[0] for p in found]) if len(found) > 1 else found[0][0]
        tfs = np.concatenate([p[1] for p in found]) if len(found) > 1 else found[0][1]
        if self._live_rows < self._alive.shape[0]:
            live = self._alive[rows]
            rows, tfs = rows[live], tfs[live]
        return rows, tfs

    def _best(self, rows: np.ndarray, scores: np.ndarray, k: int) -> list[tuple[int, float]]:
        k = min(k, rows.shape[0])
        if k == 0:
            return []
        top = np.argpartition(-scores, k - 1)[:k] if k < rows.shape[0] else np.arange(rows.shape[0])
        # the k-th best score may be shared by rows past the partition: take every row tied with it
        cut = scores[top].min()
        top = np.flatnonzero(scores >= cut)
        chunk_ids = self._chunk_ids[rows[top]]
        order = np.lexsort((chunk_ids, -scores[top]))[:k]
        return [(int(chunk_ids[i]), float(scores[top][i])) for i in order]

    def remove_documents(self, document_ids: Collection[str]) -> int:
        """Drop the rows of these documents; how many were dropped."""
        codes = np.asarray([self._code_of[d] for d in document_ids if d in self._code_of], dtype=np.int32)
        self._masks.clear()
        for document_id in document_ids:
            self._code_of.pop(document_id, None)  # the code stays allotted to its (dead) rows
        if codes.size == 0:
            return 0
        gone = self._alive & np.isin(self._codes, codes)
        dropped = int(np.count_nonzero(gone))
        self._alive &= ~gone
        self._live_rows -= dropped
        self._live_tokens -= int(self._lengths[gone].sum())
        if (self._alive.shape[0] - self._live_rows) * _COMPACT_SHARE >= self._alive.shape[0]:
            self._compact()
        return dropped

    def _compact(self) -> None:
        """Rewrite rows and postings without the dead rows."""
        renumbered = np.cumsum(self._alive, dtype=np.int64) - 1
        parts = []
        for segment in self._segments:
            term_of, rows, tfs = segment.expanded()
            live = self._alive[rows]
            parts.append((term_of[live], renumbered[rows[live]], tfs[live]))
        self._segments = [merged(parts)] if self._live_rows else []
        keep = self._alive
        self._chunk_ids, self._lengths = self._chunk_ids[keep], self._lengths[keep]
        self._codes, self._alive = self._codes[keep], self._alive[keep]

    def _allowed(self, documents: Collection[str]) -> np.ndarray:
        """A mask over document codes: True for those of `documents`."""
        key = documents if isinstance(documents, frozenset) else None
        mask = self._masks.get(key) if key is not None else None
        if mask is None or mask.shape[0] < self._next_code:  # codes allotted since: made again
            mask = np.zeros(self._next_code, dtype=bool)
            mask[[self._code_of[d] for d in documents if d in self._code_of]] = True
            if key is not None:
                if len(self._masks) >= _KEPT_FILTERS:
                    self._masks.clear()
                self._masks[key] = mask
        return mask

    def _code(self, document_id: str) -> int:
        code = self._code_of.get(document_id)
        if code is None:
            code = self._code_of[document_id] = self._next_code
            self._next_code += 1
        return code


def idf_of(rows: int, matching: int) -> float:
    """FTS5's bm25 IDF for a word in `matching` of `rows` rows."""
    idf = math.log((rows - matching + 0.5) / (matching + 0.5))
    return idf if idf > 0 else MIN_IDF


def bm25_term(idf: float, tf: float, dl: float, avgdl: float) -> float:
    """One word's BM25 contribution to a row's score (the reference `TextIndex._scored` matches)."""
    return idf * (tf * (K1 + 1.0)) / (tf + K1 * (1.0 - B + B * dl / avgdl))
