"""The relevance check of `agentos_bench.micro.fts`: recall@10 of the full-text rankings against
an exhaustive bm25 computed by SQLite itself (an implementation independent of `TextIndex`).

`knowledge.db` keeps no FTS5 index any more (version 1 dropped it: nothing on the query path
read it), so `reference_db` builds one for the check, in memory, from the file's chunks.

One difference between the two: FTS5 counts every column's tokens in a row's length, so the
collection id's tokens too; on the bench's corpus (every chunk of one length) that changes no
order. `TextIndex` itself is checked exactly against a brute-force BM25 in its tests."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from agentos.knowledge import filters
from agentos.knowledge.indexes import IndexEntry
from agentos.knowledge.words import query_terms


def relevance(entry: IndexEntry, texts: list[str], path: Path) -> None:
    """recall@10 of the in-memory ranking against an exhaustive FTS5 bm25 over every searched
    word (no word left out, no window): an independent implementation of the same scoring, on
    this file of one collection (so its statistics are the collection's). A tie with the 10th
    counts as found."""
    filtered = {"team": "t3"}
    allowed = {d for d, (_, m) in entry.documents.items() if m.get("team") == "t3"}
    db = reference_db(path)  # `--path`, absolute by default
    print("| recall@10 against exhaustive bm25 | no filter | filter |\n| --- | ---: | ---: |")
    try:
        cells = []
        for flt, docs in (({}, None), (filtered, allowed)):
            found = 0.0
            for text in texts:
                truth = exhaustive_bm25(db, query_terms(text), 10, flt)
                found += recall(truth, [c for c, _ in entry.text.search(query_terms(text), 10, docs)])
            cells.append(f"{found / len(texts):.4f}")
        print(f"| in-memory BM25 (the query path) | {cells[0]} | {cells[1]} |")
    finally:
        db.close()


def reference_db(path: Path) -> sqlite3.Connection:
    """A database in memory with `knowledge.db` at `path` attached read-only and an FTS5 table
    `chunks_fts` of its chunks (text and collection id, as the file's own index held them), so
    `exhaustive_bm25` joins it to the file's `chunks` and `documents`."""
    db = sqlite3.connect("file::memory:", uri=True)  # uri: so the ATTACH below reads its URI
    db.execute("ATTACH DATABASE ? AS k", (f"file:{path}?mode=ro",))
    db.execute("CREATE VIRTUAL TABLE chunks_fts USING fts5(text, collection_id)")
    db.execute("INSERT INTO chunks_fts (rowid, text, collection_id) SELECT chunk_id, text, collection_id FROM k.chunks")
    return db


def exhaustive_bm25(
    db: sqlite3.Connection, words: list[str], k: int, metadata_filter: dict[str, Any]
) -> list[tuple[int, float]]:
    """The top k by FTS5's bm25 over every match of any of `words` (ties: every chunk tied with the kth)."""
    if not words:
        return []
    where, params = filters.sqlite_where(metadata_filter)
    sql = (
        "SELECT f.rowid, bm25(chunks_fts, 1.0, 0.0) AS score FROM chunks_fts f"
        " JOIN chunks c ON c.chunk_id = f.rowid JOIN documents d ON d.document_id = c.document_id"
        f" WHERE chunks_fts MATCH ? AND {where} ORDER BY score, f.rowid"
    )
    rows = db.execute(sql, (filters.fts5_or(words), *params)).fetchall()
    if len(rows) <= k:
        return [(r[0], -r[1]) for r in rows]
    kth = rows[k - 1][1]
    return [(r[0], -r[1]) for r in rows if r[1] <= kth + abs(kth) * 1e-12]


def recall(truth: list[tuple[int, float]], got: list[int], k: int = 10) -> float:
    """Share of the true top k in `got[:k]`; `truth` lists every chunk tied with the kth too, any
    of which counts as found."""
    if not truth:
        return 1.0
    return len({c for c, _ in truth} & set(got[:k])) / min(k, len(truth))
