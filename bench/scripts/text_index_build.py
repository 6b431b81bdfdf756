"""The full-text index's build alone, in process: CPU and wall time of `TextIndex.add` of a whole
collection in one batch (what a collection's first query after a start does), at each size,
with the steps of the build (tokenizing, term ids, postings), and, with `--before FILE` (another
`text_index.py`, e.g. `git show <ref>:src/agentos/knowledge/text_index.py > FILE`), the other
build timed in turn with this one (before, now, before, now...) so a change of the machine's
load hits both alike; then both indexes answer the same questions and must agree exactly.

    .venv/bin/python bench/scripts/text_index_build.py --chunks 30000 100000 [--before /tmp/text_index_old.py]

The corpus is the knowledge micro-bench's (`agentos_bench.micro.fts.corpus`: chunks of 60 Zipf-drawn
words, ten per document), the questions its `queries`. Wall time on a shared machine includes
waiting for a core: CPU time (`time.process_time`) is printed beside it, with the load average.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from agentos.knowledge import text_index
from agentos.knowledge.postings import batch_segment
from agentos.knowledge.words import batch_tokens, query_terms
from agentos_bench.micro.fts import corpus, queries


def load_module(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("text_index_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    gc.collect()
    began, began_cpu = time.perf_counter(), time.process_time()
    result = fn()
    return result, time.perf_counter() - began, time.process_time() - began_cpu


def steps(texts: list[str]) -> dict[str, float]:
    """CPU seconds of each step of this build, run one after the other as `add` runs them."""
    index = text_index.TextIndex()
    words, _, tokenize = timed(lambda: batch_tokens(texts))
    vocabulary = index._vocabulary
    _, _, lookup = timed(lambda: np.fromiter(map(vocabulary.__getitem__, words), dtype=np.int64, count=len(words)))
    (term_of, lengths), _, _ = timed(lambda: text_index.TextIndex()._term_ids(texts))
    _, _, postings = timed(lambda: batch_segment(term_of, lengths, 0))
    return {"tokenize": tokenize, "term ids": lookup, "postings": postings}


def build(module: ModuleType, ids: list[int], documents: list[str], texts: list[str]) -> tuple[Any, float, float]:
    index = module.TextIndex()
    _, wall, cpu = timed(lambda: index.add(ids, documents, texts))
    return index, wall, cpu


def agree(now: Any, before: Any, seed: int) -> int:
    """Both indexes' answers to the bench's questions (top 40, unfiltered and one group of ten
    documents): identical chunk ids and scores, or an AssertionError. How many were compared."""
    group = {f"doc_{d:07d}" for d in range(0, 10_000, 10)}
    asked = 0
    for question in queries(200, seed):
        terms = query_terms(question)
        for allowed in (None, group):
            assert now.search(terms, 40, allowed) == before.search(terms, 40, allowed), question
            asked += 1
    return asked


def run(chunks: int, seed: int, rounds: int, before: ModuleType | None) -> None:
    docs = corpus(chunks, seed)
    texts = [t for _, _, chunk_texts in docs for t in chunk_texts]
    documents = [d for d, _, chunk_texts in docs for _ in chunk_texts]
    ids = list(range(1, len(texts) + 1))
    builds = {"now": text_index} | ({"before": before} if before else {})
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in builds}
    built: dict[str, Any] = {}
    for _ in range(rounds):
        for name, module in builds.items():
            built[name], wall, cpu = build(module, ids, documents, texts)
            times[name].append((wall, cpu))
    print(f"\n{len(texts):,} chunks, {sum(len(t.split()) for t in texts):,} words; one `add` each, {rounds} rounds\n")
    print("| build | wall s (each round) | CPU s (each round) |\n| --- | --- | --- |")
    for name, each in times.items():
        print(f"| {name} | {' / '.join(f'{w:.2f}' for w, _ in each)} | {' / '.join(f'{c:.2f}' for _, c in each)} |")
    print("\nsteps of this build, CPU s: " + ", ".join(f"{k} {v:.2f}" for k, v in steps(texts).items()))
    if before is not None:
        print(f"answers compared with the build before: {agree(built['now'], built['before'], seed)}, all identical")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chunks", type=int, nargs="+", default=[30_000, 100_000])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before", help="another text_index.py to time in turn with this one")
    args = parser.parse_args()
    before = load_module(args.before) if args.before else None
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for chunks in args.chunks:
        run(chunks, args.seed, args.rounds, before)
    print(f"\nload average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
