"""A micro-benchmark of knowledge queries, in process: where a hybrid query's time goes.

    python -m agentos_bench.micro.fts --chunks 100000 --backend sqlite|postgres

It fills one collection of a storage directly (documents with metadata, chunks of Zipf-drawn
words whose most common ones are English stopwords, vectors from the mock provider's
embedding function), then times, for a fixed set of queries with and without a metadata
filter: the full-text search alone, the vector search alone, and the whole `KnowledgeService.query`
path (its query embedding computed in process: no provider, no HTTP), last while documents
are being saved. It prints p50/p95 per
step as a Markdown table. Deterministic: the same arguments give the same corpus and queries.

Not the load bench (`agentos bench knowledge` measures the server under load); this one is for
finding and comparing the cost of each step while changing them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from agentos.config import Settings
from agentos.knowledge.records import ChunkRow, Collection, DocumentRow
from agentos.knowledge.service import KnowledgeService
from agentos.knowledge.sqlite_storage import SqliteKnowledgeStorage
from agentos.knowledge.storage import KnowledgeStorage
from agentos.knowledge.words import query_terms
from agentos.mock.embeddings import embed_texts
from agentos_bench.micro.fts_relevance import relevance

TENANT = "bench"
MODEL = "mock-embed"
DIMS = 256
CHUNKS_PER_DOC = 20
WORDS_PER_CHUNK = 60
# The head of the vocabulary: real English stopwords are the commonest words of real text.
STOPWORDS = [
    "the",
    "of",
    "and",
    "to",
    "a",
    "in",
    "is",
    "that",
    "for",
    "it",
    "as",
    "with",
    "on",
    "be",
    "by",
    "this",
    "are",
    "or",
    "from",
    "at",
]
VOCABULARY = STOPWORDS + [f"w{i}" for i in range(20_000)]
QUESTIONS = ["how do i", "what is the", "why does the", "where can i find the", ""]


class LocalEmbedder:
    """The mock provider's embedding function, called in process (the service's embedder
    interface): the bench times the query path, not the provider."""

    async def embed(self, tenant_id: str, model: str, dimensions: int, texts: Sequence[str]) -> np.ndarray:
        return embed_texts(list(texts), model, dimensions).astype(np.float32)

    async def aclose(self) -> None:
        return None


def zipf_words(rng: random.Random, count: int) -> list[str]:
    weights = _WEIGHTS
    return rng.choices(VOCABULARY, cum_weights=weights, k=count)


_WEIGHTS = list(np.cumsum([1.0 / (rank + 1) for rank in range(len(VOCABULARY))]))


def corpus(chunks: int, seed: int) -> list[tuple[str, dict[str, Any], list[str]]]:
    """(document id, metadata, chunk texts) of `chunks` chunks, `CHUNKS_PER_DOC` per document."""
    rng = random.Random(seed)
    docs = []
    for d in range(max(1, chunks // CHUNKS_PER_DOC)):
        meta = {"team": f"t{d % 10}", "year": 2020 + d % 7}
        texts = [" ".join(zipf_words(rng, WORDS_PER_CHUNK)) for _ in range(CHUNKS_PER_DOC)]
        docs.append((f"doc_{d:07d}", meta, texts))
    return docs


def queries(count: int, seed: int) -> list[str]:
    """Natural-language-like questions: a stopword opening, then 2-5 Zipf words (some common)."""
    rng = random.Random(seed + 1)
    return [f"{rng.choice(QUESTIONS)} {' '.join(zipf_words(rng, rng.randint(2, 5)))}".strip() for _ in range(count)]


async def fill(storage: KnowledgeStorage, collection: Collection, chunks: int, seed: int) -> None:
    docs = corpus(chunks, seed)
    batch = 50
    for start in range(0, len(docs), batch):
        await ingest(storage, collection, docs[start : start + batch])
    # documents the service's own indexer claimed first: no event tells when it is done with them
    while await storage.pending():  # noqa: ASYNC110
        await asyncio.sleep(0.05)


async def ingest(
    storage: KnowledgeStorage, collection: Collection, docs: list[tuple[str, dict[str, Any], list[str]]]
) -> None:
    """Insert, claim and save these documents as the indexer would (one transaction each)."""
    await asyncio.gather(
        *(storage.insert_document(_row(collection, d, m), b"x", max_documents=10**9) for d, m, _ in docs)
    )
    claimed = await storage.claim_documents("bench", 1, 10**9, len(docs))
    texts = {d: t for d, _, t in docs}
    saves = []
    for doc, _, _ in claimed:
        chunk_texts = texts[doc.document_id]
        vectors = embed_texts(chunk_texts, MODEL, DIMS).astype("<f4")
        rows = [ChunkRow(0, doc.document_id, i, t, vectors[i].tobytes()) for i, t in enumerate(chunk_texts)]
        saves.append(storage.save_chunks("bench", doc.document_id, rows, 2))
    await asyncio.gather(*saves)


async def during_ingest(service: KnowledgeService, collection: Collection, texts: list[str], rounds: int) -> None:
    """The service's query while other documents are saved one after the other (the indexer's
    work), and how many were saved meanwhile; last, since it grows the collection."""
    stop = asyncio.Event()
    more = [(f"more_{d}", m, t) for d, m, t in corpus(len(texts) * rounds * 20 * CHUNKS_PER_DOC, 99)]

    async def feed() -> int:
        for n, doc in enumerate(more):
            if stop.is_set():
                return n
            await ingest(service.storage, collection, [doc])
        return len(more)

    feeding = asyncio.create_task(feed())
    try:
        times = await timed([partial(service.query, TENANT, "bench", t, top_k=5) for t in texts], rounds)
    finally:
        stop.set()
        saved = await feeding
    print(f"| query during ingest (service; {saved} documents saved meanwhile) | {_cells(times)} |")


def _cells(times: tuple[float, ...]) -> str:
    return " | ".join(f"{t:.2f}" for t in times)


def _row(collection: Collection, document_id: str, metadata: dict[str, Any]) -> DocumentRow:
    return DocumentRow(
        document_id,
        TENANT,
        collection.collection_id,
        f"title {document_id}",
        "text/plain",
        1,
        "0" * 64,
        metadata,
        "queued",
        1,
        1,
        None,
    )


async def timed(calls: Sequence[Callable[[], Awaitable[Any]]], rounds: int) -> tuple[float, float, float, float]:
    """(p50, p95) of the wall time, then of the process's CPU time (every thread's), in ms. On a
    machine shared with other work the wall time includes waiting for a core; the CPU time is
    what the call itself costs (the ingest beside `during_ingest` counts in it too)."""
    walls, cpus = [], []
    for _ in range(rounds):
        for call in calls:
            began, began_cpu = time.perf_counter(), time.process_time()
            await call()
            walls.append((time.perf_counter() - began) * 1000)
            cpus.append((time.process_time() - began_cpu) * 1000)
    return (*_p50_p95(walls), *_p50_p95(cpus))


def _p50_p95(samples: list[float]) -> tuple[float, float]:
    samples = sorted(samples)
    return statistics.median(samples), samples[min(len(samples) - 1, int(len(samples) * 0.95))]


@asynccontextmanager
async def open_service(backend: str, path: Path, keep: bool = False) -> AsyncIterator[KnowledgeService]:
    if backend == "sqlite":
        settings = Settings()
        storage: KnowledgeStorage = SqliteKnowledgeStorage(path)
        service = KnowledgeService(settings, storage, LocalEmbedder())
        await service.start()
        try:
            yield service
        finally:
            await service.close()
        return
    async with _pg_service(keep) as service:
        yield service


@asynccontextmanager
async def _pg_service(keep: bool) -> AsyncIterator[KnowledgeService]:
    import secrets

    import asyncpg

    from agentos.config import StoreConfig
    from agentos.knowledge.pg_storage import PgKnowledgeStorage

    url = os.environ.get("TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
    schema = f"bench_{secrets.token_hex(4)}"
    config = StoreConfig(backend="postgres", postgres_url=url, postgres_schema=schema)
    settings = Settings(store=config)
    service = KnowledgeService(settings, PgKnowledgeStorage(config), LocalEmbedder())
    await service.start()
    try:
        yield service
    finally:
        await service.close()
        if keep:
            print(f"kept schema {schema}")
        else:
            admin = await asyncpg.connect(url)
            await admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            await admin.close()


async def run(args: argparse.Namespace) -> None:
    path = Path(args.path)
    async with open_service(args.backend, path, args.keep) as service:
        storage = service.storage
        spec = {"name": "bench", "embedding_model": MODEL, "dimensions": DIMS}
        collection = await service.create_collection(TENANT, spec)
        began = time.perf_counter()
        await fill(storage, collection, args.chunks, args.seed)
        print(f"filled {args.chunks} chunks in {time.perf_counter() - began:.1f} s ({args.backend})\n")
        await report(service, collection, queries(args.queries, args.seed), args.rounds)


async def report(service: KnowledgeService, collection: Collection, texts: list[str], rounds: int) -> None:
    filtered = {"team": "t3"}
    began = time.perf_counter()
    began_cpu = time.process_time()
    await service.query(TENANT, "bench", "warm up", top_k=5)  # loads the indexes (vectors, full text) once
    loaded_ms, loaded_cpu_ms = (time.perf_counter() - began) * 1000, (time.process_time() - began_cpu) * 1000
    vectors = [(await LocalEmbedder().embed(TENANT, MODEL, DIMS, [t]))[0] for t in texts]
    entry = await service._indexes.current(collection)
    allowed = {d for d, (_, m) in entry.documents.items() if m.get("team") == "t3"}
    storage, cache = service.storage, service._indexes
    terms = [query_terms(t) for t in texts]
    query = partial(service.query, TENANT, "bench", top_k=5)
    steps: list[tuple[str, list[Callable[[], Awaitable[Any]]]]] = [
        ("full_text: in-memory BM25 (the query path)", [partial(cache.search_text, entry, w, 40, None) for w in terms]),
        ("full_text + filter: in-memory BM25", [partial(cache.search_text, entry, w, 40, allowed) for w in terms]),
        ("vector search", [partial(cache.search, entry, v, 40, None) for v in vectors]),
        ("vector search + mask", [partial(cache.search, entry, v, 40, allowed) for v in vectors]),
        ("query (service)", [partial(query, t) for t in texts]),
        ("query + filter (service)", [partial(query, t, metadata_filter=filtered) for t in texts]),
    ]
    print(f"{len(texts)} queries x {rounds} rounds, e.g. {texts[:3]}\n")
    print(
        f"first query (loads both indexes of {len(entry.text)} chunks): {loaded_ms:.0f} ms ({loaded_cpu_ms:.0f} ms"
        f" CPU); load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}; index memory:"
        f" vectors {entry.index.nbytes / 1e6:.1f} MB, full text {entry.text.nbytes / 1e6:.1f} MB\n"
    )
    print("| step | p50 ms | p95 ms | CPU p50 ms | CPU p95 ms |\n| --- | ---: | ---: | ---: | ---: |")
    for name, calls in steps:
        print(f"| {name} | {_cells(await timed(calls, rounds))} |")
    await during_ingest(service, collection, texts, rounds)
    if isinstance(storage, SqliteKnowledgeStorage) and storage.path is not None:
        print()
        relevance(entry, texts, storage.path)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m agentos_bench.micro.fts", description=__doc__.split("\n")[0])
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--path", default="/tmp/agentos-ftsmicro.db", help="the SQLite file (deleted before and after)")
    parser.add_argument("--keep", action="store_true", help="keep the SQLite file or schema")
    args = parser.parse_args(argv)
    Path(args.path).unlink(missing_ok=True)
    asyncio.run(run(args))
    if not args.keep:
        Path(args.path).unlink(missing_ok=True)


if __name__ == "__main__":
    main()
