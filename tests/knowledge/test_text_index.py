"""`TextIndex` against a brute-force BM25 written from the formula: the same top k, bit for bit,
on random corpora built by appends (segments merged) and deletions (dead rows skipped, then
compacted), with and without a document filter."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentos.knowledge.text_index import TextIndex, bm25_term, idf_of
from agentos.knowledge.words import batch_tokens, query_terms, tokens
from agentos_bench.micro.fts import corpus, queries

WORDS = ["kafka", "lag", "consumer", "the", "of", "vacuum", "café", "cafe", "w1", "w2", "w3", "x"]


@dataclass
class Corpus:
    """What the index should hold: the live chunks, as (chunk id, document id, text)."""

    chunks: list[tuple[int, str, str]] = field(default_factory=list)
    next_id: int = 1

    def brute_force(self, terms: list[str], k: int, documents: frozenset[str] | None) -> list[tuple[int, float]]:
        if not self.chunks:
            return []
        counted = {cid: Counter(tokens(text)) for cid, _, text in self.chunks}
        lengths = {cid: sum(c.values()) for cid, c in counted.items()}
        avgdl = sum(lengths.values()) / len(self.chunks)
        scores: dict[int, float] = {}
        for term in dict.fromkeys(terms):
            df = sum(1 for c in counted.values() if c[term])
            if not df:
                continue
            idf = idf_of(len(self.chunks), df)
            for cid, _, _ in self.chunks:
                if counted[cid][term]:
                    scores[cid] = scores.get(cid, 0.0) + bm25_term(idf, counted[cid][term], lengths[cid], avgdl)
        owner = {cid: doc for cid, doc, _ in self.chunks}
        ranked = sorted(
            ((cid, s) for cid, s in scores.items() if documents is None or owner[cid] in documents),
            key=lambda pair: (-pair[1], pair[0]),
        )
        return ranked[:k]


texts = st.lists(st.sampled_from(WORDS), min_size=0, max_size=12).map(" ".join)
batch = st.lists(st.tuples(st.integers(0, 5), st.lists(texts, min_size=1, max_size=4)), min_size=1, max_size=4)
steps = st.lists(st.one_of(st.tuples(st.just("add"), batch), st.tuples(st.just("delete"), st.integers(0, 5))))


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(
    steps=steps,
    query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=5).map(" ".join),
    k=st.integers(1, 8),
    allowed=st.none() | st.sets(st.integers(0, 5)),
    gap=st.integers(1, 3),
)
def test_the_top_k_is_exactly_brute_force_bm25(steps, query, k, allowed, gap) -> None:
    index, corpus = TextIndex(), Corpus()
    # one frozenset throughout, as the cache hands a repeated filter: its kept mask must follow the adds and deletes
    documents = None if allowed is None else frozenset(f"doc_{d}" for d in allowed)
    terms = query_terms(query)
    for kind, arg in steps:
        if kind == "add":
            rows = [(f"doc_{d}", text) for d, chunk_texts in arg for text in chunk_texts]
            ids = list(range(corpus.next_id, corpus.next_id + gap * len(rows), gap))
            corpus.next_id = ids[-1] + 1
            index.add(ids, [d for d, _ in rows], [t for _, t in rows])
            corpus.chunks += [(cid, d, t) for cid, (d, t) in zip(ids, rows, strict=True)]
        else:
            gone = f"doc_{arg}"
            dropped = index.remove_documents({gone})
            assert dropped == sum(1 for _, d, _ in corpus.chunks if d == gone)
            corpus.chunks = [c for c in corpus.chunks if c[1] != gone]
        assert len(index) == len(corpus.chunks)
        assert index.search(terms, k, documents) == corpus.brute_force(terms, k, documents)


def test_a_filter_is_inside_the_search() -> None:
    """The best chunks are another document's: a filtered query still fills its page."""
    index = TextIndex()
    strong = [f"kafka kafka kafka {i}" for i in range(20)]
    index.add(list(range(1, 21)), ["doc_a"] * 20, strong)
    index.add([21, 22, 23], ["doc_b"] * 3, ["kafka and a lot of other words here", "kafka", "no match"])
    assert [c for c, _ in index.search(["kafka"], 2, {"doc_b"})] == [22, 21]
    assert index.search(["kafka"], 5, {"doc_c"}) == []
    assert index.search(["kafka"], 5, set()) == []
    assert len(index.search(["kafka"], 100, None)) == 22


def test_deletions_leave_results_at_once_and_compaction_keeps_the_rest() -> None:
    index = TextIndex()
    for n in range(8):  # one document per batch: several segments
        index.add([n * 10 + 1, n * 10 + 2], [f"doc_{n}"] * 2, [f"kafka lag {n}", f"consumer {n}"])
    before = index.search(["kafka", "consumer"], 16)
    assert index.remove_documents({"doc_0"}) == 2  # under a quarter dead: skipped, not rewritten
    assert [c for c, _ in index.search(["kafka"], 16)] == [c for c, _ in before if c > 10 and c % 10 == 1]
    assert index.remove_documents({"doc_1", "doc_2", "doc_3"}) == 6  # past a quarter: rewritten
    assert len(index) == 8
    assert {c for c, _ in index.search(["kafka", "consumer"], 16)} == {c for c, _ in before if c > 40}
    assert index.remove_documents({"doc_1", "doc_unknown"}) == 0
    index.add([100], ["doc_1"], ["kafka again"])  # a deleted document's id may come back
    assert 100 in {c for c, _ in index.search(["kafka"], 16, {"doc_1"})}
    for n in range(4, 8):
        index.remove_documents({f"doc_{n}"})
    index.remove_documents({"doc_1"})
    assert len(index) == 0 and index.search(["kafka"], 5) == []


def test_appends_must_increase_and_match() -> None:
    index = TextIndex()
    index.add([5], ["d"], ["a"])
    with pytest.raises(ValueError, match="increase"):
        index.add([5], ["d"], ["b"])
    with pytest.raises(ValueError, match="increase"):
        index.add([7, 6], ["d", "d"], ["b", "c"])
    with pytest.raises(ValueError, match="texts"):
        index.add([8], ["d"], [])
    index.add([], [], [])
    assert index.last_chunk_id == 5 and index.nbytes > 0


def test_query_and_text_words_agree() -> None:
    assert tokens("Café-au-lait, NAÏVE x_y 42") == ["cafe", "au", "lait", "naive", "x", "y", "42"]
    assert query_terms("what is the Café?") == ["cafe"]  # stopwords out, accents folded
    assert query_terms("the of") == ["the", "of"]  # only stopwords: searched
    assert query_terms("?!") == []
    long = "a" * 70
    assert tokens(long) == ["a" * 64, "a" * 6] and query_terms(long) == ["a" * 64]
    # ASCII text takes a faster pattern: the same tokens as the Unicode one, on every character
    every_ascii = "".join(map(chr, range(128))) * 3 + " Hello_World-42 x" + "B" * 70
    assert tokens(every_ascii) == re.findall(r"[^\W_]{1,64}", every_ascii.lower())
    index = TextIndex()
    index.add([1], ["d"], [f"{long} CAFÉ"])
    assert [c for c, _ in index.search(query_terms(f"{long} cafe"), 5)] == [1]


ODD_TEXTS = [
    "",
    "ΟΔΟΣ ΟΔΟΣ. Σ ΑΣ",  # lower() turns a final sigma into ς: per text, not across the batch's joins
    "Café-au-lait, NAÏVE x_y 42",
    "nul\x00inside\x00",
    "a" * 70 + "É" * 3,
    "??",
    "Straße ﬁne ½ Ⅻ",  # NFKD: ligatures and numerals decomposed
    "plain ascii after unicode",
]


def test_a_batch_is_tokenized_as_each_text_alone() -> None:
    """The batch tokenizer (one pass over the texts joined) gives each text's own tokens, each
    followed by one end mark, whatever the texts hold (NULs included)."""
    for texts in (ODD_TEXTS, ODD_TEXTS[::-1], ["x"], [""], ["\x00"], ["abc", "ÉTÉ"] * 3):
        expected = [w for text in texts for w in (*tokens(text), "\x00")]
        assert batch_tokens(texts) == expected


def _postings(index: TextIndex) -> set[tuple[str, int, int]]:
    """(word, chunk id, term frequency) of every posting the index holds."""
    words = {term: word for word, term in index._vocabulary.items()}
    held = set()
    for segment in index._segments:
        terms, rows, tfs = segment.expanded()
        held |= {(words[int(t)], int(index._chunk_ids[r]), int(f)) for t, r, f in zip(terms, rows, tfs, strict=True)}
    return held


def test_the_build_holds_what_the_text_by_text_build_held() -> None:
    """On a fixed corpus (the bench's Zipf words and odd Unicode texts, added in batches of
    several sizes): the postings are exactly each text's own token counts (what the build did
    text by text before the batch tokenizer), and every query's top 10 is brute-force BM25's,
    scores bit for bit."""
    texts = [t for _, _, chunk_texts in corpus(150, 3) for t in chunk_texts] + ODD_TEXTS * 3
    index, reference = TextIndex(), Corpus()
    start = 0
    for size in (1, 7, 100, 3, len(texts)):
        part = texts[start : start + size]
        ids = list(range(start + 1, start + 1 + len(part)))
        index.add(ids, [f"doc_{i // 10}" for i in ids], part)
        reference.chunks += [(i, f"doc_{i // 10}", t) for i, t in zip(ids, part, strict=True)]
        start += len(part)
    expected = {(w, cid, n) for cid, _, text in reference.chunks for w, n in Counter(tokens(text)).items()}
    assert _postings(index) == expected
    for query in [*queries(20, 3), "ΟΔΟΣ ας", "cafe naive straße fine", "a" * 64]:
        terms = query_terms(query)
        assert index.search(terms, 10) == reference.brute_force(terms, 10, None)
        chosen = frozenset({"doc_3", "doc_7"})
        assert index.search(terms, 10, chosen) == reference.brute_force(terms, 10, chosen)


HOSTILE = [
    "",
    "   ",
    '"',
    '"unbalanced',
    "NEAR(",
    "NEAR(a b, 2)",
    "*",
    "a*",
    "-",
    "-word",
    "^",
    "col:word",
    "AND OR NOT",
    "'); DROP TABLE chunks; --",
    "(((",
    "word & | ! <-> :*",
    "\\",
    "\x00",
    "ünïcödé 日本語 🙂",
    "x" * 10_000,
]


@pytest.mark.parametrize("query", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_queries_are_words_or_nothing(query: str) -> None:
    """Queries written against a query language (FTS5's, tsquery's) are only words here."""
    index = TextIndex()
    index.add([1], ["doc_1"], ["word near and or not ünïcödé 日本語 drop table"])
    hits = index.search(query_terms(query), 5)
    assert hits in ([], [(1, hits[0][1] if hits else 0.0)])
    assert [c for c, _ in index.search(query_terms('"WORD*" NEAR( -table'), 5)] == [1]
