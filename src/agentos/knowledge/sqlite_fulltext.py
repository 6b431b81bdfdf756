"""The full-text search of `knowledge.db` (FTS5, bm25), fast on large collections.

Not on the query path any more: the service searches the in-memory `TextIndex` (exact BM25,
`agentos.knowledge.text_index`), built from the same chunks. This stays as the storage's
`full_text` (the contract tests, and the bench's comparison with an on-disk search).

What made it slow: a query ORs its words, so a common word matches most chunks, and ranking
them joined every match to `chunks` and `documents` before sorting. Three things keep it cheap,
none of which changes which chunks a page holds beyond what is said here:

- Words that cannot rank are not searched. bm25's IDF is `log((N - n + 0.5) / (n + 0.5))`, which
  FTS5 clamps to 1e-6 once a word is in half the rows or more: such a word adds nothing to a
  score but makes the search walk most of the index. So, from the file's own statistics (the
  `chunks_vocab` table, the same counts bm25 uses), words in more than half the rows are left
  out, the rarest word always kept; and at most `MAX_SEARCHED` words, the rarest, are searched.
  (English stopwords are already out: `filters.search_words`.)
- The collection is one term of its id in the `collection_id` column (`collection_term`), not
  its id as a phrase.
- FTS5 ranks on its own (`ORDER BY rank`) a window of the best matches, and only that window
  is joined to the chunks and documents, where the collection and the metadata filter are
  checked: the filter is still inside the search, ahead of the page's LIMIT.
- If the window did not yield a full page (a selective filter, or fewer matches than that),
  the query runs again over every match (no window), as before: a page never comes back short
  because of the window.

Ties: by chunk id everywhere, so results are deterministic.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Mapping
from typing import Any

from agentos.knowledge import filters

_TOKEN = re.compile(r"[^\W_]+")  # what FTS5's unicode61 tokenizer keeps as a token
MAX_SEARCHED = 16
COMMON_SHARE = 0.5  # bm25 weighs a word in more than this share of the rows as ~0
WINDOW_PER_RESULT = 25  # with a filter: this many ranked matches per wanted result are checked
MAX_WINDOW = 5000

_RANKED = (
    "SELECT rowid, rank FROM chunks_fts WHERE chunks_fts MATCH ? AND rank MATCH 'bm25(1.0, 0.0)'"
    " ORDER BY rank, rowid LIMIT ?"
)
_JOIN = (
    " JOIN chunks c ON c.chunk_id = f.rowid JOIN documents d ON d.document_id = c.document_id"
    " WHERE c.collection_id = ? AND d.status = 'ready' AND {where} ORDER BY f.rank, c.chunk_id LIMIT ?"
)


def full_text(
    collection_id: str, query: str, metadata_filter: Mapping[str, Any], limit: int, db: sqlite3.Connection
) -> list[int]:
    searched = rankable_words(db, filters.search_words(query))
    if not searched or limit <= 0:
        return []
    match = f"({filters.fts5_or(searched)})"
    term = collection_term(collection_id)
    if term is not None:
        match = f'collection_id : "{term}" AND {match}'
    where, params = filters.sqlite_where(metadata_filter)
    window = limit if where == "1" else max(limit, min(limit * WINDOW_PER_RESULT, MAX_WINDOW))
    sql = f"SELECT c.chunk_id FROM ({_RANKED}) f" + _JOIN.format(where=where)
    found = [r[0] for r in db.execute(sql, (match, window, collection_id, *params, limit))]
    if len(found) == limit:
        return found
    return [r[0] for r in db.execute(sql, (match, -1, collection_id, *params, limit))]  # every match


def collection_term(collection_id: str) -> str | None:
    """The FTS5 term that narrows a search to the collection's rows: the longest token of its id
    (`col_<36 hex>`: the hex part, unique to it); None for an id with no token. One term, not the
    whole id as a phrase: a phrase's first token, `col`, is in every row of the file, and walking
    it and checking positions cost as much as the search itself. It only narrows:
    `c.collection_id = ?` decides (a shared token makes a window come back short, and the search
    then runs over every match)."""
    tokens = _TOKEN.findall(collection_id.lower())
    return max(tokens, key=len) if tokens else None


def rankable_words(db: sqlite3.Connection, words: list[str]) -> list[str]:
    """The words of `words` in some row, without those in more than `COMMON_SHARE` of the rows
    (the rarest one always kept), at most `MAX_SEARCHED` of them, rarest first (ties by the word)."""
    if len(words) <= 1:
        return words
    counts = {w: _rows_with(db, w) for w in words}
    rarest = sorted((w for w in words if counts[w]), key=lambda w: (counts[w], w))
    (rows,) = db.execute("SELECT coalesce(sum(chunks), 0) FROM collections").fetchone()
    kept = [w for w in rarest if counts[w] <= rows * COMMON_SHARE] or rarest[:1]
    return kept[:MAX_SEARCHED]


def _rows_with(db: sqlite3.Connection, word: str) -> int:
    row = db.execute("SELECT doc FROM chunks_vocab WHERE term = ?", (word,)).fetchone()
    return int(row[0]) if row else 0
