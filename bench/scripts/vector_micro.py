"""The vector search alone, in process: latency, CPU, recall@10 and memory of `VectorIndex` at
100k chunks, on random unit vectors and on the knowledge bench's corpus (its chunks embedded by
the mock provider's function), unfiltered and with the bench's filter (one group of ten).

    .venv/bin/python bench/scripts/vector_micro.py --chunks 100000 [--before /tmp/index_old.py]
        [--load | --load-only] [--alternatives]

Each query asks the index for `candidates(10)` = 40 hits, as a query of top_k 10 does; recall@10 is
its first 10 against an exact float64 search (`agentos_bench.knowledge.metrics`, ties with the
10th counted as found). `--before FILE` also times another `index.py` (e.g. `git show
<ref>:src/agentos/knowledge/index.py > FILE`), in turn with this one by blocks of 50 queries, so a
change of the machine's load hits both alike. `--alternatives` times other ways numpy can scan
every row (float32 through BLAS, int8, float16, fewer dimensions). `--load` also times a collection's first load from a
`knowledge.db` of that many chunks (the store's read, then each index's build). Wall time on a
shared machine includes waiting for a core: CPU time (the process's, every thread's) is printed
beside it, with the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import random
import sqlite3
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from agentos.knowledge import index as current
from agentos.knowledge.chunking import split
from agentos.knowledge.retrieval import candidates
from agentos_bench.knowledge.corpus import Corpus, query_from
from agentos_bench.knowledge.metrics import exact_top_k, latency_ms, recall_at_k, unit_rows
from agentos_bench.knowledge.plan import CHUNK_OVERLAP, CHUNK_TOKENS, TOP_K, WORDS_PER_DOCUMENT
from agentos_bench.micro.knowledge_fill import mock_vectors

MODEL = "mock-embed"
GROUPS = 10  # the bench's filter keeps one group of ten
BLOCK = 50
SETTLE_S = 0.3  # OpenBLAS threads spin about 0.1 s after a call before they sleep


class Dataset:
    def __init__(self, name: str, vectors: np.ndarray, owners: list[str], queries: np.ndarray) -> None:
        self.name, self.vectors, self.owners, self.queries = name, vectors, owners, queries
        groups = [int(owner.rsplit("_", 1)[1]) % GROUPS == 3 for owner in owners]
        # a frozenset, as the server's filter cache hands it (`indexes.allowed`)
        self.allowed = frozenset(owner for owner, keep in zip(owners, groups, strict=True) if keep)
        self.mask = np.asarray(groups, dtype=bool)


def random_set(chunks: int, dims: int, queries: int, seed: int) -> Dataset:
    """Unit vectors drawn at random (no structure: the hardest case for an approximate index),
    20 chunks per document."""
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((chunks, dims), dtype=np.float32)
    owners = [f"doc_{i // 20}" for i in range(chunks)]
    return Dataset("random", vectors, owners, rng.standard_normal((queries, dims), dtype=np.float32))


def corpus_set(chunks: int, dims: int, queries: int, seed: int) -> Dataset:
    """The bench's corpus chunked as its collections are, and queries of 8 words of a chunk."""
    corpus, texts, owners = Corpus(seed), [], []
    document = 0
    while len(texts) < chunks:
        pieces = split(corpus.document(document, WORDS_PER_DOCUMENT).text, CHUNK_TOKENS, CHUNK_OVERLAP)
        texts += pieces
        owners += [f"doc_{document}"] * len(pieces)
        document += 1
    texts, owners = texts[:chunks], owners[:chunks]
    rng = random.Random(seed)
    asked = [query_from(texts[rng.randrange(chunks)], rng) for _ in range(queries)]
    return Dataset("bench corpus", mock_vectors(texts, MODEL, dims), owners, mock_vectors(asked, MODEL, dims))


def load_module(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("index_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(module: ModuleType, vectors: np.ndarray, owners: list[str]) -> tuple[Any, float]:
    """The index, built as the server's first load does (one batch); (index, seconds)."""
    started = time.perf_counter()
    index = module.VectorIndex(vectors.shape[1])
    index.add(list(range(1, len(owners) + 1)), owners, vectors)
    return index, time.perf_counter() - started


def measure(data: Dataset, indexes: dict[str, Any], filtered: bool) -> dict[str, dict[str, Any]]:
    """Per index: wall time per query, CPU per query and recall@10. The indexes take turns by
    blocks of `BLOCK` queries; a block's CPU is the process's (every thread's) until `SETTLE_S`
    after its last query, so BLAS threads that spin on after a query are charged to the index
    that woke them, not to the next block."""
    unit, ids = unit_rows(data.vectors), np.arange(1, len(data.owners) + 1)
    documents, mask = (data.allowed, data.mask) if filtered else (None, None)
    exact = [exact_top_k(unit, ids, query, TOP_K, mask) for query in data.queries]
    del unit
    walls: dict[str, list[float]] = {name: [] for name in indexes}
    cpu_s = dict.fromkeys(indexes, 0.0)
    recalls: dict[str, list[float]] = {name: [] for name in indexes}
    outside = dict.fromkeys(indexes, 0)
    for start in range(0, len(data.queries), BLOCK):
        for name, index in indexes.items():
            began_cpu = time.process_time()
            for query, truth in zip(data.queries[start : start + BLOCK], exact[start : start + BLOCK], strict=True):
                began = time.perf_counter()
                found = index.search(query, candidates(TOP_K), documents)
                walls[name].append(time.perf_counter() - began)
                top = [chunk_id for chunk_id, _ in found[:TOP_K]]
                recalls[name].append(recall_at_k(top, truth, TOP_K))
                if mask is not None:
                    outside[name] += sum(1 for chunk_id in top if not mask[chunk_id - 1])
            time.sleep(SETTLE_S)
            cpu_s[name] += time.process_time() - began_cpu
    return {
        name: {"latency": latency_ms(walls[name]), "cpu_ms": 1000 * cpu_s[name] / len(walls[name]),
               "recall": float(np.mean(recalls[name])), "outside": outside[name]}
        for name in indexes
    }  # fmt: skip


def search_table(datasets: list[Dataset], modules: dict[str, ModuleType]) -> None:
    print("| vectors | filter | index | p50 ms | p95 ms | CPU ms per query | recall@10 | hits outside filter"
          " | memory per 100k chunks | build s |")  # fmt: skip
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for data in datasets:
        built = {name: build(module, data.vectors, data.owners) for name, module in modules.items()}
        indexes = {name: index for name, (index, _) in built.items()}
        for filtered in (False, True):
            for name, row in measure(data, indexes, filtered).items():
                index, seconds = built[name]
                memory = index.nbytes * 100_000 / len(index) / 1e6
                lat = row["latency"]
                print(f"| {data.name} | {'one group of 10' if filtered else 'none'} | {name} | {lat['p50']} |"
                      f" {lat['p95']} | {row['cpu_ms']:.2f} | {row['recall']:.4f} | {row['outside']} |"
                      f" {memory:.1f} MB | {seconds:.2f} |")  # fmt: skip
        del built, indexes


def alternatives_table(data: Dataset, queries: int = 50) -> None:
    """What a scan of every row costs by the ways numpy offers (no top k, no rerank: the pass
    itself), on one core's worth of calls: why the index scans float32 with `einsum`."""
    vectors = current._normalise(data.vectors.copy())
    scale = np.abs(vectors).max(axis=1, keepdims=True)
    as_int8 = np.round(vectors / scale * 127).astype(np.int8)
    as_float16, quarter = vectors.astype(np.float16), np.ascontiguousarray(vectors[:, : vectors.shape[1] // 4])
    out, block = np.empty(len(vectors), np.float32), np.empty((2048, vectors.shape[1]), np.float32)

    def by_blocks(matrix: np.ndarray, q: np.ndarray) -> None:  # cast 2048 rows at a time, then einsum
        for start in range(0, len(matrix), 2048):
            rows = block[: len(matrix[start : start + 2048])]
            np.copyto(rows, matrix[start : start + 2048], casting="unsafe")
            np.einsum("ij,j->i", rows, q, out=out[start : start + len(rows)])

    ways = {
        "float32, BLAS matmul (OpenBLAS threads: the code before)": lambda q: np.matmul(vectors, q, out=out),
        "float32, einsum (one thread: the code now)": lambda q: np.einsum("ij,j->i", vectors, q, out=out),
        "float32, a quarter of the dimensions (the bytes of a 4x projection)": lambda q: np.einsum(
            "ij,j->i", quarter, q[: quarter.shape[1]], out=out),
        "int8, cast to float32 by blocks, einsum": lambda q: by_blocks(as_int8, q),
        "int8 @ int8 (numpy's integer matmul; it wraps)": lambda q: as_int8 @ np.round(q * 127).astype(np.int8),
        "float16, cast to float32 by blocks, einsum": lambda q: by_blocks(as_float16, q),
    }  # fmt: skip
    print(f"| a scan of all {len(vectors)} rows | p50 ms | p95 ms | CPU ms per query |\n| --- | ---: | ---: | ---: |")
    for name, way in ways.items():
        walls, began_cpu = [], time.process_time()
        for q in data.queries[:queries]:
            began = time.perf_counter()
            way(q)
            walls.append(time.perf_counter() - began)
        time.sleep(SETTLE_S)
        summary = latency_ms(walls)
        cpu_ms = 1000 * (time.process_time() - began_cpu) / len(walls)
        print(f"| {name} | {summary['p50']} | {summary['p95']} | {cpu_ms:.2f} |")


def fill_file(path: Path, chunks: int, dims: int, seed: int) -> str:
    """A `knowledge.db` of one collection of `chunks` chunks (60 Zipf-drawn words, random vectors),
    written by plain inserts (not the indexer: this times the load, not the ingest)."""
    from agentos.knowledge.sqlite_storage import SqliteKnowledgeStorage
    from agentos_bench.micro.fts import corpus

    storage = SqliteKnowledgeStorage(path)
    asyncio.run(storage.open())
    asyncio.run(storage.close())
    rng = np.random.default_rng(seed)
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO collections (collection_id, tenant_id, name, model, dims, chunk_tokens,"
                   " chunk_overlap, created_ms) VALUES ('col_bench', 'bench', 'bench', ?, ?, 400, 50, 1)",
                   (MODEL, dims))  # fmt: skip
        for document_id, metadata, texts in corpus(chunks, seed):
            db.execute("INSERT INTO documents (document_id, tenant_id, collection_id, title, content_type,"
                       " size_bytes, sha256, metadata, status, created_ms, updated_ms) VALUES"
                       " (?, 'bench', 'col_bench', 'x', 'text/plain', 1, '0', ?, 'ready', 1, 1)",
                       (document_id, json.dumps(metadata)))  # fmt: skip
            vectors = rng.standard_normal((len(texts), dims), dtype=np.float32)
            db.executemany("INSERT INTO chunks (collection_id, document_id, ordinal, text, vector)"
                           " VALUES ('col_bench', ?, ?, ?, ?)",
                           [(document_id, i, text, vectors[i].tobytes()) for i, text in enumerate(texts)])  # fmt: skip
    return "col_bench"


def load_table(chunks: int, dims: int, seed: int, rounds: int = 3) -> None:
    """A collection's first load as `IndexCache` does it: `chunks_after(0)` on a reader
    connection, then the vector index and the full-text index built from the batch."""
    from agentos.knowledge import sqlite_tables
    from agentos.knowledge.text_index import TextIndex

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "knowledge.db"
        collection_id = fill_file(path, chunks, dims, seed)
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, isolation_level=None)
        print("| step | wall s (each round) | CPU s (each round) |\n| --- | --- | --- |")
        steps: dict[str, list[tuple[float, float]]] = {"store read (chunks_after)": [], "vector index build": [],
                                                       "full-text index build": []}  # fmt: skip
        for _ in range(rounds):
            batch = _timed(steps["store read (chunks_after)"], sqlite_tables.chunks_after, collection_id, 0, db)
            vectors = np.frombuffer(batch.vectors, dtype="<f4").reshape(len(batch.chunk_ids), dims)
            _timed(steps["vector index build"], build, current, vectors, batch.document_ids)
            _timed(steps["full-text index build"], TextIndex().add, batch.chunk_ids, batch.document_ids, batch.texts)
            del batch, vectors
        db.close()
        for step, times in steps.items():
            walls, cpus = (" / ".join(f"{t[i]:.2f}" for t in times) for i in (0, 1))
            print(f"| {step} | {walls} | {cpus} |")


def _timed(into: list[tuple[float, float]], fn: Any, *args: Any) -> Any:
    began, began_cpu = time.perf_counter(), time.process_time()
    result = fn(*args)
    into.append((time.perf_counter() - began, time.process_time() - began_cpu))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--dims", type=int, default=256)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--before", help="another index.py to time against this one")
    parser.add_argument("--load", action="store_true", help="also time a first load from knowledge.db")
    parser.add_argument("--load-only", action="store_true", help="only time the first load")
    parser.add_argument("--alternatives", action="store_true", help="also time other ways to scan (random vectors)")
    args = parser.parse_args()
    modules = {"now": current} | ({"before": load_module(args.before)} if args.before else {})
    print(f"now: {current.__file__}" + (f"; before: {args.before}" if args.before else ""))
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
    if not args.load_only:
        datasets = [random_set(args.chunks, args.dims, args.queries, args.seed),
                    corpus_set(args.chunks, args.dims, args.queries, args.seed)]  # fmt: skip
        search_table(datasets, modules)
        if args.alternatives:
            print()
            alternatives_table(datasets[0])
    if args.load or args.load_only:
        print()
        load_table(args.chunks, args.dims, args.seed)
    print(f"\nload average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
