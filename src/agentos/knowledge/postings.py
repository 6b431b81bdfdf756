"""The postings of the in-memory full-text index (`agentos.knowledge.text_index`), in segments.

Each batch of rows added becomes a segment: for every term (an id into the index's vocabulary),
its rows (int32) and term frequencies (uint16), sorted by term (CSR: `terms`, `starts`).
Segments are merged like a binary counter (the last two while the older is no larger), so a
collection filled batch by batch holds O(log n) segments and each posting is copied O(log n)
times. Rows are the index's; a segment knows nothing of which are dead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

MAX_TF = np.iinfo(np.uint16).max  # a term frequency is capped here (uint16)


@dataclass(frozen=True, slots=True)
class Segment:
    terms: np.ndarray  # int32, sorted: the terms with postings here
    starts: np.ndarray  # int64, len(terms) + 1: term i's postings are [starts[i], starts[i + 1])
    rows: np.ndarray  # int32
    tfs: np.ndarray  # uint16

    @property
    def size(self) -> int:
        return int(self.rows.shape[0])

    def postings(self, term: int) -> tuple[np.ndarray, np.ndarray] | None:
        at = int(np.searchsorted(self.terms, term))
        if at == self.terms.shape[0] or self.terms[at] != term:
            return None
        lo, hi = int(self.starts[at]), int(self.starts[at + 1])
        return self.rows[lo:hi], self.tfs[lo:hi]

    def expanded(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(term of each posting, rows, tfs)."""
        return np.repeat(self.terms, np.diff(self.starts)), self.rows, self.tfs


def batch_segment(term_of: np.ndarray, lengths: np.ndarray, first: int) -> Segment:
    """The segment of a batch of rows numbered from `first`: `term_of`, the term id of every
    token, row after row; `lengths`, each row's number of tokens."""
    n = lengths.shape[0]
    keys = term_of.astype(np.int64) * n + np.repeat(np.arange(n, dtype=np.int64), lengths)
    # an in-place sort and a diff, not `np.unique(return_counts=True)`: the same (term, row)
    # keys and counts in a fifth of the time (numpy's SIMD sort of a plain int64 array)
    keys.sort()
    starts = np.flatnonzero(np.diff(keys, prepend=-1)) if keys.shape[0] else np.zeros(0, dtype=np.int64)
    tfs = np.diff(np.append(starts, keys.shape[0]))
    keys = keys[starts]
    return _segment(keys // n, keys % n + first, np.minimum(tfs, MAX_TF))


def append_segment(segments: list[Segment], segment: Segment) -> None:
    """Add the newest segment, merging the last two while the older is no larger."""
    segments.append(segment)
    while len(segments) >= 2 and segments[-2].size <= segments[-1].size:
        newer = segments.pop()
        segments[-1] = merged([segments[-1].expanded(), newer.expanded()])


def merged(parts: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> Segment:
    """One segment of postings given oldest first (a stable sort by term keeps rows in order)."""
    term_of = np.concatenate([p[0] for p in parts])
    order = np.argsort(term_of, kind="stable")
    rows = np.concatenate([p[1] for p in parts])[order]
    tfs = np.concatenate([p[2] for p in parts])[order]
    return _segment(term_of[order], rows, tfs)


def _segment(term_of: np.ndarray, rows: np.ndarray, tfs: np.ndarray) -> Segment:
    """A segment of postings already sorted by (term, row)."""
    first = np.flatnonzero(np.diff(term_of, prepend=-1)) if term_of.shape[0] else np.zeros(0, dtype=np.int64)
    starts = np.append(first, term_of.shape[0]).astype(np.int64)
    return Segment(term_of[first].astype(np.int32), starts, rows.astype(np.int32), tfs.astype(np.uint16))
