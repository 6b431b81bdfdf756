"""Phases 2 and 3 of the bench (see `bench.py`): a collection filled with what judges its
queries (`Truth`), and the queries through the API measured against it."""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp

from agentos_bench.common.processes import Child
from agentos_bench.knowledge import client
from agentos_bench.knowledge.corpus import Corpus, query_from
from agentos_bench.knowledge.metrics import (
    MAX_ERRORS,
    Exact,
    exact_top_k,
    latency_ms,
    mean,
    per_100k,
    rate,
    recall_at_k,
    unit_rows,
    within_budget,
)
from agentos_bench.knowledge.plan import (
    MAX_DOCUMENTS,
    ONE_GROUP,
    TENANT,
    TOP_K,
    WORDS_PER_DOCUMENT,
    KnowledgePlan,
    collection_name,
)
from agentos_bench.micro.knowledge_fill import Prepared, fill, mock_vectors, prepare

if TYPE_CHECKING:
    import numpy as np

    from agentos.knowledge.records import Collection
    from agentos.knowledge.storage import KnowledgeStorage

_SAMPLE_DOCUMENTS = 50  # to estimate chunks per document before choosing how many to make
_PART_QUERIES = 50  # queries whose full-text search alone is timed in process


@dataclass
class Truth:
    """A filled collection: its queries, their exact top 10 (unfiltered and filtered), and what
    the in-process index made of them."""

    size: int
    name: str
    queries: list[str]
    exact: dict[str, list[Exact]]  # "none" / "group" -> per query
    group_documents: set[str]
    fill: dict[str, Any] = field(default_factory=dict)
    index: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        return {"name": self.name, "target_chunks": self.size, "fill": self.fill, "index": self.index}


async def build_truth(storage: KnowledgeStorage, plan: KnowledgePlan, corpus: Corpus, size: int, start: int) -> Truth:
    name = collection_name(size)
    collection = await storage.get_collection(TENANT, name)
    if collection is None:
        raise RuntimeError(f"collection {name!r} was not created")
    prepared, embed_s = _prepare_at_least(corpus, collection, size, start)
    documents = [p.document for p in prepared]
    chunks, seconds = await fill(storage, collection, prepared, max_documents=MAX_DOCUMENTS)
    fill_result = {
        "documents": len(documents),
        "chunks": chunks,
        "seconds": round(seconds, 3),
        "documents_per_s": rate(len(documents), seconds),
        "chunks_per_s": rate(chunks, seconds),
        "embed_in_process_s": round(embed_s, 3),
    }
    truth = await _judge(storage, plan, collection, size)
    truth.fill = fill_result
    return truth


def _prepare_at_least(corpus: Corpus, collection: Collection, size: int, start: int) -> tuple[list[Prepared], float]:
    """Documents from `start` on, prepared, until their chunks reach `size`; (prepared, embed seconds)."""
    sample, embed_s = prepare(list(corpus.documents(_SAMPLE_DOCUMENTS, WORDS_PER_DOCUMENT, start)), collection)
    per_document = sum(len(p.vectors) for p in sample) / len(sample)
    prepared = sample[: max(1, math.ceil(size / per_document))]
    while (chunks := sum(len(p.vectors) for p in prepared)) < size:
        more = math.ceil((size - chunks) / per_document) + 1
        batch, seconds = prepare(list(corpus.documents(more, WORDS_PER_DOCUMENT, start + len(prepared))), collection)
        prepared += batch
        embed_s += seconds
    return prepared, embed_s


async def _judge(storage: KnowledgeStorage, plan: KnowledgePlan, collection: Collection, size: int) -> Truth:
    import numpy as np

    collection_id, dimensions, name = collection.collection_id, collection.dimensions, collection.name
    ids_list, documents, blob = await storage.vectors_after(collection_id, 0)
    ids = np.asarray(ids_list, dtype=np.int64)
    matrix = np.frombuffer(blob, dtype=np.float32).reshape(len(ids_list), dimensions)
    metadata = await storage.document_metadata(collection_id)
    group = {d for d, (_, m) in metadata.items() if all(m.get(k) == v for k, v in ONE_GROUP.items())}
    mask = np.asarray([d in group for d in documents], dtype=bool)
    rng = random.Random(plan.seed + size)
    picked = rng.sample(ids_list, min(plan.queries, len(ids_list)))
    texts = [query_from(c.text, rng) for c in await storage.chunks(collection_id, picked)]
    vectors = mock_vectors(texts, collection.embedding_model, dimensions)
    unit = unit_rows(matrix)
    exact = {
        "none": [exact_top_k(unit, ids, q, TOP_K) for q in vectors],
        "group": [exact_top_k(unit, ids, q, TOP_K, mask) for q in vectors],
    }
    del unit
    truth = Truth(size, name, texts, exact, group)
    truth.index = _index_in_process(ids_list, documents, matrix, vectors, truth)
    truth.index["full_text_ms"] = await _full_text_timing(
        storage, collection_id, texts[:_PART_QUERIES], plan.budget_s, group
    )
    return truth


async def _full_text_timing(
    storage: KnowledgeStorage, collection_id: str, texts: list[str], budget_s: float, group: set[str]
) -> dict[str, Any]:
    """The full-text search alone, as a query runs it (the server's in-memory `TextIndex`, built
    here from the same chunks; the candidates of a top 10, the filter as the documents it
    allows), timed in process: the part of a query's latency the vector index does not explain."""
    from agentos.knowledge.retrieval import candidates
    from agentos.knowledge.text_index import TextIndex
    from agentos.knowledge.words import query_terms

    batch = await storage.chunks_after(collection_id, 0)
    index = TextIndex()
    index.add(batch.chunk_ids, batch.document_ids, batch.texts)
    timings: dict[str, Any] = {"nbytes": index.nbytes}
    for key, allowed in (("none", None), ("group", group)):
        seconds: list[float] = []
        spent = 0.0
        for text in texts:
            if not within_budget(len(seconds), spent, budget_s, 0):
                break
            started = time.perf_counter()
            index.search(query_terms(text), candidates(TOP_K), allowed)
            seconds.append(time.perf_counter() - started)
            spent += seconds[-1]
        timings[key] = {**latency_ms(seconds), "errors": 0}
    return timings


def _index_in_process(
    ids: list[int], documents: list[str], matrix: np.ndarray, vectors: np.ndarray, truth: Truth
) -> dict[str, Any]:
    """The collection's `VectorIndex`, as the server builds it: its memory, and its recall@10
    against exact search on the same query embeddings (vector search alone, no fusion)."""
    from agentos.knowledge.index import VectorIndex
    from agentos.knowledge.retrieval import candidates

    index = VectorIndex(matrix.shape[1])
    index.add(ids, documents, matrix)
    recall: dict[str, float | None] = {}
    timing: dict[str, Any] = {}
    # the filter as the server's cache hands it (`indexes.allowed`): a frozenset, whose rows the index keeps
    for key, allowed in (("none", None), ("group", frozenset(truth.group_documents))):
        found, seconds = [], []
        for q in vectors:
            started = time.perf_counter()
            ranked = index.search(q, candidates(TOP_K), allowed)  # as many as a query asks the index for
            seconds.append(time.perf_counter() - started)
            found.append([c for c, _ in ranked[:TOP_K]])
        recall[key] = mean([recall_at_k(f, e, TOP_K) for f, e in zip(found, truth.exact[key], strict=True)])
        timing[key] = latency_ms(seconds)
    return {
        "chunks": len(index),
        "nbytes": index.nbytes,
        "nbytes_per_100k_chunks": per_100k(index.nbytes, len(index)),
        "vector_recall_at_10": recall,
        "vector_search_ms": timing,
    }


async def fill_phase(plan: KnowledgePlan, settings: Any, data_dir: Path, corpus: Corpus) -> dict[int, Truth]:
    """Phase 2: each collection filled to its size; what phase 3 needs to judge its hits."""
    from agentos.knowledge.service import open_knowledge_storage

    storage = open_knowledge_storage(settings, data_dir)
    await storage.open()
    try:
        truths, start = {}, 0
        for size in plan.sizes:
            truths[size] = await build_truth(storage, plan, corpus, size, start)
            start += truths[size].fill["documents"]
        return truths
    finally:
        await storage.close()


def rss_bytes(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


async def query_phase(plan: KnowledgePlan, server: Child, truths: dict[int, Truth]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    async with aiohttp.ClientSession() as http:
        for size in plan.sizes:
            rows += await _query_collection(http, plan, server, truths[size])
    return rows


async def _query_collection(
    http: aiohttp.ClientSession, plan: KnowledgePlan, server: Child, truth: Truth
) -> list[dict[str, Any]]:
    before, gauge_before = rss_bytes(server.pid), await client.index_bytes(http, server.url)
    started = time.perf_counter()
    first_error = await _attempt(http, server.url, truth.name, truth.queries[0], None)  # loads the index
    load_s = time.perf_counter() - started
    after, gauge_after = rss_bytes(server.pid), await client.index_bytes(http, server.url)
    warmup_errors = 0
    for text in truth.queries[: plan.warmup_queries]:
        if warmup_errors >= MAX_ERRORS:
            break
        warmup_errors += await _attempt(http, server.url, truth.name, text, ONE_GROUP)
    loading = {
        "first_query_ms": round(load_s * 1000, 2),
        "first_query_failed": bool(first_error),
        "warmup_errors": warmup_errors,
        "rss_before": before,
        "rss_after": after,
        "rss_growth": _difference(after, before),
        "index_bytes_gauge": _difference(gauge_after, gauge_before),
    }
    return [await _measure(http, server.url, truth, key, loading, plan.budget_s) for key in ("none", "group")]


async def _attempt(
    http: aiohttp.ClientSession, url: str, name: str, text: str, metadata_filter: dict[str, Any] | None
) -> int:
    """One query whose answer is not measured: 1 if it failed, else 0."""
    try:
        await client.query(http, url, name, text, TOP_K, metadata_filter)
    except (client.BenchHTTPError, aiohttp.ClientError, TimeoutError):
        return 1
    return 0


def _difference(after: int | None, before: int | None) -> int | None:
    return after - before if after is not None and before is not None else None


async def _measure(
    http: aiohttp.ClientSession, url: str, truth: Truth, key: str, loading: dict[str, Any], budget_s: float
) -> dict[str, Any]:
    metadata_filter = ONE_GROUP if key == "group" else None
    latencies: list[float] = []
    recalls, outside, errors, spent = [], 0, 0, 0.0
    for text, exact in zip(truth.queries, truth.exact[key], strict=True):
        if not within_budget(len(latencies), spent, budget_s, errors):
            break
        started = time.perf_counter()
        try:
            seconds, hits = await client.query(http, url, truth.name, text, TOP_K, metadata_filter)
        except (client.BenchHTTPError, aiohttp.ClientError, TimeoutError):  # a 503 (store timeout): counted
            errors += 1
            spent += time.perf_counter() - started
            continue
        spent += seconds
        latencies.append(seconds)
        recalls.append(recall_at_k([int(h["chunk_id"]) for h in hits], exact, TOP_K))
        if metadata_filter:
            outside += sum(1 for h in hits if h["document_id"] not in truth.group_documents)
    return {
        "collection": truth.name,
        "chunks": truth.fill.get("chunks"),
        "filter": metadata_filter,
        "latency_ms": latency_ms(latencies),
        "hybrid_recall_at_10": mean(recalls),
        "hits_outside_filter": outside,
        "errors": errors,
        "index_load": loading,
    }
