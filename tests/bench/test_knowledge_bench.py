"""`agentos bench knowledge`: its arithmetic and report (pure), and a small real run (a real
`agentos serve` and mock process, SQLite) whose report must hold together."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest

from agentos.config import settings_from_dict
from agentos_bench.knowledge.cli import main
from agentos_bench.knowledge.corpus import Corpus, query_from, vocabulary
from agentos_bench.knowledge.metrics import (
    Exact,
    exact_top_k,
    latency_ms,
    per_100k,
    rate,
    recall_at_k,
    scaled,
    unit_rows,
    within_budget,
)
from agentos_bench.knowledge.plan import KnowledgePlan, server_config, toml_text
from agentos_bench.knowledge.report import build_report, knowledge_markdown, redact, summarize


def test_exact_top_k_is_cosine_in_float64_with_ties_by_id() -> None:
    vectors = unit_rows(np.array([[1, 0], [0, 1], [2, 0.1], [1, 0], [-1, 0], [0, 0]], dtype=np.float32))
    assert vectors.dtype == np.float64 and np.allclose(np.linalg.norm(vectors[:5], axis=1), 1.0)
    assert not vectors[5].any()  # a zero row stays zero (never a match better than an orthogonal one)
    ids = np.array([10, 11, 12, 13, 14, 15])
    top3 = exact_top_k(vectors, ids, np.array([1.0, 0.0]), 3)
    assert top3.top == [10, 13, 12] and top3.acceptable == {10, 13, 12}  # 10 and 13 tie: lower id first
    top1 = exact_top_k(vectors, ids, np.array([1.0, 0.0]), 1)
    assert top1.top == [10] and top1.acceptable == {10, 13}  # 13 scores as well as the first
    mask = np.array([False, True, True, False, True, False])
    assert exact_top_k(vectors, ids, np.array([1.0, 0.0]), 2, mask).top == [12, 11]
    assert exact_top_k(vectors, ids, np.array([1.0, 0.0]), 2, np.zeros(6, dtype=bool)) == Exact([], frozenset())


def test_recall_rates_and_scaling() -> None:
    assert recall_at_k([1, 2, 3], Exact([3, 2, 9], frozenset({3, 2, 9})), 3) == pytest.approx(2 / 3)
    assert recall_at_k([1, 2, 3, 4], Exact([4, 5], frozenset({4, 5})), 2) == 0.0  # only the first k found count
    assert recall_at_k([7], Exact([6], frozenset({6, 7})), 1) == 1.0  # a tie with the k-th is as good
    assert recall_at_k([], Exact([], frozenset()), 10) == 1.0
    assert rate(10, 2.0) == 5.0 and rate(10, 0.0) is None
    assert scaled(10_000, 0.02) == 200 and scaled(300, 0.001, 5) == 5
    assert per_100k(1_000, 1_000) == 100_000 and per_100k(5, 0) is None
    assert within_budget(19, 500.0, 60.0)  # p95 gets its 20 samples whatever they cost
    assert within_budget(20, 59.0, 60.0) and not within_budget(20, 60.0, 60.0)
    assert not within_budget(0, 0.0, 60.0, errors=3)  # three failures end a configuration


def test_latency_summary_needs_enough_samples_for_a_tail() -> None:
    few = latency_ms([0.001, 0.002, 0.003])
    assert few == {"n": 3, "p50": 2.0, "p95": None, "p99": None, "max": 3.0, "mean": 2.0}
    many = latency_ms([i / 1000 for i in range(1, 101)])
    assert (many["p50"], many["p95"], many["p99"], many["max"]) == (50.0, 95.0, 99.0, 100.0)
    assert latency_ms([])["p50"] is None


def test_the_corpus_is_deterministic_and_grouped() -> None:
    words = vocabulary()
    assert len(set(words)) == len(words) == 5000 and words == vocabulary()
    corpus = Corpus(seed=3)
    first = corpus.document(7, 230)
    assert first == Corpus(seed=3).document(7, 230) and first != Corpus(seed=4).document(7, 230)
    assert len(first.text.split()) == 230 and first.metadata == {"group": "g7"}
    query = query_from(first.text, random.Random(1))
    assert len(query.split()) == 8 and query in " ".join(t.strip(".,").lower() for t in first.text.split())


def test_the_server_config_round_trips_through_toml() -> None:
    plan = KnowledgePlan(backend="postgres", postgres_url='postgresql://u:p"w@127.0.0.1/test')
    tree = server_config(plan, "bench_x")
    import tomllib

    assert tomllib.loads(toml_text(tree)) == tree
    settings = settings_from_dict(tree)
    assert settings.store.postgres_schema == "bench_x" and settings.knowledge.max_documents == 100_000
    assert redact("postgresql://u:secret@h:5432/db") == "postgresql://u:***@h:5432/db"
    assert redact("postgresql://postgres@127.0.0.1/test") == "postgresql://postgres@127.0.0.1/test"


def _result(p95_big: float) -> dict[str, Any]:
    def row(name: str, chunks: int, flt: Any, p95: float, recall: float) -> dict[str, Any]:
        latency = {"n": 200, "p50": 1.0, "p95": p95, "p99": p95, "max": p95, "mean": 1.0}
        load = {
            "first_query_ms": 50.0,
            "rss_before": 100,
            "rss_after": 2**20 + 100,
            "rss_growth": 2**20,
            "index_bytes_gauge": 2**21,
        }
        return {
            "collection": name,
            "chunks": chunks,
            "filter": flt,
            "latency_ms": latency,
            "hybrid_recall_at_10": recall,
            "hits_outside_filter": 0,
            "index_load": load,
        }

    def coll(name: str, chunks: int) -> dict[str, Any]:
        fill = {
            "documents": 10,
            "chunks": chunks,
            "seconds": 1.0,
            "documents_per_s": 10.0,
            "chunks_per_s": float(chunks),
            "embed_in_process_s": 0.5,
        }
        index = {
            "chunks": chunks,
            "nbytes": chunks * 1024,
            "nbytes_per_100k_chunks": 100_000 * 1024,
            "vector_recall_at_10": {"none": 1.0, "group": 0.99},
            "vector_search_ms": {"none": latency_ms([0.001] * 20), "group": latency_ms([0.002] * 20)},
            "full_text_ms": {
                "none": latency_ms([0.003] * 20),
                "group": latency_ms([0.004] * 20),
                "nbytes": chunks * 512,
            },
        }
        return {"name": name, "target_chunks": chunks, "fill": fill, "index": index}

    api = {"method": "m", "documents": 5, "chunks": 25, "seconds": 2.0, "documents_per_s": 2.5, "chunks_per_s": 12.5}
    queries = [
        row("c10", 10, None, 3.0, 0.9),
        row("c10", 10, {"group": "g3"}, 4.0, 0.8),
        row("c100", 100, None, p95_big, 0.7),
        row("c100", 100, {"group": "g3"}, 5.0, 0.95),
    ]
    return {"ingest_api": api, "collections": [coll("c10", 10), coll("c100", 100)], "queries": queries}


def test_the_summary_judges_the_largest_collection() -> None:
    plan = KnowledgePlan()
    within = summarize(plan, _result(p95_big=12.0))
    assert within["largest_chunks"] == 100 and within["p95_ms_largest"] == 12.0 and within["p95_within_target"]
    assert within["hybrid_recall_min"] == 0.7 and within["vector_recall_min"] == 0.99
    assert within["vector_recall_within_target"]
    over = summarize(plan, _result(p95_big=25.0))
    assert over["p95_ms_largest"] == 25.0 and not over["p95_within_target"]


def test_the_markdown_has_the_header_the_verdict_and_the_tables() -> None:
    report = build_report(KnowledgePlan(command="agentos bench knowledge --scale 1"), _result(p95_big=25.0))
    text = knowledge_markdown(report, {"query latency": "x-latency.png"})
    needed = [
        "- **Machine:**",
        "- **Command:** `agentos bench knowledge --scale 1`",
        "**25.00 ms**",
        "NOT met",
        "| API, embedding included | 5 | 25 | 2.00 | 2.5 | 12.5 |",
        "| `c100` | 100 | none |",
        "| 0.700 | 0 | 0 |",
        "| `c10` | 10 | 0.0 | 97.7 | 1.000 / 0.990 | 0.0 | 50.00 | 2.0 | 1.0 |",
        "![query latency](x-latency.png)",
        "| `c100` | 100 | group | 2.00 / 2.00 (n=20) | 4.00 / 4.00 (n=20) |",
    ]
    for line in needed:
        assert line in text, line


def test_a_small_run_writes_a_consistent_report(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(["--scale", "0.01", "--out-dir", str(out), "--name", "ci", "--keep-dir", str(tmp_path / "w")]) == 0
    (report_path,) = out.glob("*.json")
    report = msgspec.json.decode(report_path.read_bytes())
    assert report["command"].startswith("agentos bench knowledge --scale 0.01")
    assert report["ingest_api"]["documents"] == 5 and report["ingest_api"]["chunks"] >= 6
    assert [c["fill"]["chunks"] >= c["target_chunks"] for c in report["collections"]] == [True, True]
    for row in report["queries"]:
        assert row["latency_ms"]["n"] == 20 and row["latency_ms"]["p95"] is not None
        assert row["hits_outside_filter"] == 0 and row["errors"] == 0  # the filter is applied inside the search
        assert 0.0 <= row["hybrid_recall_at_10"] <= 1.0
    for coll in report["collections"]:
        assert coll["index"]["vector_recall_at_10"]["none"] >= 0.95  # the index is exact search in float32
        assert coll["index"]["nbytes"] >= coll["index"]["chunks"] * report["corpus"]["dimensions"] * 4
        assert (
            coll["index"]["vector_search_ms"]["none"]["n"] == 20 and coll["index"]["full_text_ms"]["group"]["n"] == 20
        )
    assert (out / report_path.name.replace(".json", ".md")).read_text().startswith("# Knowledge:")
