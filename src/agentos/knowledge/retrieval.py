"""How the two searches of a query are sized and fused.

Each search returns more candidates than the caller's `top_k`: reciprocal rank fusion rewards a
chunk both searches rank well, and a chunk ranked 12th by one search and 3rd by the other must
be in both lists to be scored for both. Both searches apply the filter inside, so every
candidate is one the caller may see; fusion only orders them.
"""

from __future__ import annotations

from collections.abc import Sequence

RRF_K = 60  # the constant of Cormack et al. (2009)
MIN_CANDIDATES = 40
MAX_CANDIDATES = 400
CANDIDATES_PER_RESULT = 4


def candidates(top_k: int) -> int:
    """How many chunks each search returns for a query that wants `top_k`."""
    return min(max(top_k * CANDIDATES_PER_RESULT, MIN_CANDIDATES), max(MAX_CANDIDATES, top_k))


def fuse(nearest: list[int], words: list[int], top_k: int) -> list[tuple[int, float]]:
    """The `top_k` best chunk ids of the two rankings, with their fused scores."""
    return reciprocal_rank_fusion([ranking for ranking in (nearest, words) if ranking])[:top_k]


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
