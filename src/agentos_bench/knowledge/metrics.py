"""The bench's arithmetic, pure: exact nearest neighbours, recall@k, rates and latency summaries.

Exact search is the yardstick for recall: cosine similarity in float64 over every vector of the
collection (only the filter's documents when there is a filter), ties broken by the lower chunk
id, as the index under test breaks them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentos_bench.report.stats import min_samples, nearest_rank

if TYPE_CHECKING:
    import numpy as np


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """`vectors` in float64, each row scaled to unit length (a zero row stays zero): computed
    once per collection, then every query's exact search is one matrix product."""
    import numpy as np

    rows = vectors.astype(np.float64)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    unit: np.ndarray = rows / norms
    return unit


TIE_EPSILON = 1e-6  # float32 storage against float64 arithmetic: scores this close are a tie


@dataclass(frozen=True, slots=True)
class Exact:
    """The exact answer to one query: the top k ids (ties by lower id), and every id that scores
    as well as the k-th (a search that returns another of equally scored chunks is not wrong)."""

    top: list[int]
    acceptable: frozenset[int]


def exact_top_k(unit: np.ndarray, chunk_ids: np.ndarray, query: np.ndarray, k: int, mask: Any = None) -> Exact:
    """The `k` rows most similar (cosine) to `query`, best first.

    Args:
        unit: (n, d) rows from `unit_rows`.
        chunk_ids: (n,) the id of each row.
        mask: an (n,) boolean array of the candidates; None: all.
    """
    import numpy as np

    q = query.astype(np.float64)
    q = q / (np.linalg.norm(q) or 1.0)
    scores = unit @ q
    ids = chunk_ids
    if mask is not None:
        scores, ids = scores[mask], ids[mask]
    if len(scores) == 0:
        return Exact([], frozenset())
    order = np.lexsort((ids, -scores))[:k]  # by score descending, then id ascending
    kth = scores[order[-1]]
    acceptable = frozenset(int(i) for i in ids[scores >= kth - TIE_EPSILON])
    return Exact([int(i) for i in ids[order]], acceptable)


def recall_at_k(found: Sequence[int], exact: Exact, k: int) -> float:
    """The share of the exact top k that `found[:k]` finds, a tie with the k-th counting as
    found; 1.0 when there is nothing to find."""
    wanted = len(exact.top[:k])
    if not wanted:
        return 1.0
    hits = len(set(found[:k]) & exact.acceptable)
    return min(1.0, hits / wanted)


def mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def rate(count: int, seconds: float) -> float | None:
    """Per second; None when nothing was timed."""
    return count / seconds if seconds > 0 else None


def latency_ms(values_s: Sequence[float]) -> dict[str, float | int | None]:
    """`n`, p50, p95, p99, max and mean in milliseconds (2 decimals: these are milliseconds
    near 1, where the sweep reports' 0.1 would hide the difference); a tail percentile with too
    few samples is None (`agentos_bench.report.stats.min_samples`)."""
    ordered = sorted(values_s)
    found: dict[str, float | int | None] = {"n": len(ordered)}
    for p in (50, 95, 99):
        enough = bool(ordered) and len(ordered) >= min_samples(p)
        found[f"p{p}"] = round(nearest_rank(ordered, p) * 1000, 2) if enough else None
    found["max"] = round(ordered[-1] * 1000, 2) if ordered else None
    average = mean(ordered)
    found["mean"] = round(average * 1000, 2) if average is not None else None
    return found


MIN_TAIL_SAMPLES = 20  # p95 needs 20 (`agentos_bench.report.stats.min_samples`)
MAX_ERRORS = 3  # failed queries (a timeout, a 503) after which a configuration stops: it is reported as failing


def within_budget(done: int, elapsed_s: float, budget_s: float, errors: int = 0) -> bool:
    """Whether to measure another query: not after `MAX_ERRORS` failures; else always until p95
    has its 20 samples, then while the configuration's time budget lasts (a slow search must not
    make a run last hours)."""
    if errors >= MAX_ERRORS:
        return False
    return done < MIN_TAIL_SAMPLES or elapsed_s < budget_s


def scaled(value: int, scale: float, minimum: int = 1) -> int:
    """`value * scale` rounded, at least `minimum`."""
    return max(minimum, round(value * scale))


def per_100k(nbytes: int, chunks: int) -> int | None:
    """Bytes for 100 000 chunks at the measured bytes per chunk."""
    return round(nbytes * 100_000 / chunks) if chunks else None
