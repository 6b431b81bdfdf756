"""Chunks: within the limit, cut at the largest boundary that fits, overlapping, fast."""

from __future__ import annotations

import time

from hypothesis import given, settings
from hypothesis import strategies as st

from agentos.knowledge.chunking import chunk_spans, count_tokens, split

PROSE = (
    "# Install\n\nRun the installer. It asks two questions! Answer them.\n\n"
    "## Configure\n\nEdit the file; set the port. Restart the service?\nThen check the logs.\n\n"
) * 20


def test_count_tokens_is_an_estimate_that_leans_high_on_prose() -> None:
    assert count_tokens("") == 0
    assert count_tokens("   \t ") == 0
    assert count_tokens("the quick brown fox") == 4
    assert count_tokens("Hello, world!") == 4
    assert count_tokens("internationalization") == 4  # 20 letters, 6 a token
    assert count_tokens("1234567") == 3  # digits in threes
    assert count_tokens("日本語") == 3
    assert count_tokens("a\n\n  b") == 3  # a line break is a token


def test_count_is_subadditive() -> None:
    """What the splitter relies on: a join counts at most the sum of its parts."""
    samples = ["word", "wordy ", "\n", " \n ", "12", "34.", "日本", "abcdefg", "hij", ""]
    for a in samples:
        for b in samples:
            assert count_tokens(a + b) <= count_tokens(a) + count_tokens(b)


def test_chunks_are_within_the_limit_and_overlap() -> None:
    chunks = split(PROSE, 40, 8)
    assert len(chunks) > 5
    assert all(0 < count_tokens(c) <= 40 for c in chunks)
    assert all(c == c.strip() and c for c in chunks)
    for before, after in zip(chunks, chunks[1:], strict=False):
        # the overlap is the previous chunk's end, from a word start
        head = after.split()[0]
        assert head in before.split()[-10:]


def test_paragraphs_are_kept_whole_when_they_fit() -> None:
    text = "First paragraph here.\n\nSecond paragraph here.\n\nThird one."
    assert split(text, 6, 0) == ["First paragraph here.", "Second paragraph here.", "Third one."]
    assert split(text, 100, 0) == [text]


def test_sentences_then_words_then_a_hard_cut() -> None:
    sentences = "One two three. Four five six. Seven eight nine."
    assert split(sentences, 4, 0) == ["One two three.", "Four five six.", "Seven eight nine."]
    assert split("alpha beta gamma delta", 2, 0) == ["alpha beta", "gamma delta"]
    word = "x" * 60  # 10 tokens, no boundary in it
    chunks = split(word, 3, 0)
    assert "".join(chunks) == word
    assert [count_tokens(c) for c in chunks] == [3, 3, 3, 1]


def test_overlap_as_large_as_the_chunk_is_clamped_and_ends() -> None:
    text = " ".join(f"w{i}" for i in range(200))
    for overlap in (5, 10, 50, 10_000):
        chunks = split(text, 10, overlap)
        assert all(count_tokens(c) <= 10 for c in chunks)
        assert chunks[-1].endswith("w199")
    assert split("a b c", 1, 1) == ["a", "b", "c"]  # a chunk of 1 token has no room for an overlap


def test_empty_and_blank_texts_have_no_chunks() -> None:
    assert split("", 10, 2) == []
    assert split(" \n\n \t", 10, 2) == []
    assert split("x", 10, 2) == ["x"]


def test_deterministic() -> None:
    assert split(PROSE, 30, 5) == split(PROSE, 30, 5)


def test_a_megabyte_splits_fast() -> None:
    paragraphs = (PROSE * 60)[: 1 << 20]
    one_line = ("lorem ipsum dolor sit amet consectetur " * 30_000)[: 1 << 20]
    one_word = "z" * (1 << 20)
    for text in (paragraphs, one_line, one_word):
        # CPU time, not wall time: a busy machine (CI's other workers) must not fail it; a split
        # that went quadratic would take minutes of CPU on a megabyte, not a second.
        started = time.process_time()
        chunks = split(text, 400, 50)
        assert time.process_time() - started < 1.0
        assert max(count_tokens(c) for c in chunks) <= 400


PARTS = list("ab cdé1.!?\n\t#日,") + ["word ", "\n\n", "# h\n", "1234", "xxxxxxx", ". ", "  "]
TEXTS = st.lists(st.sampled_from(PARTS), max_size=150).map("".join)


@settings(max_examples=300, deadline=None)
@given(text=TEXTS, chunk_tokens=st.integers(1, 30), overlap=st.integers(0, 40))
def test_every_chunk_fits_and_the_chunks_cover_the_text(text: str, chunk_tokens: int, overlap: int) -> None:
    spans = chunk_spans(text, chunk_tokens, overlap)
    chunks = split(text, chunk_tokens, overlap)
    assert chunks == [text[s.start : s.end] for s in spans]
    assert all(chunk.strip() == chunk and chunk for chunk in chunks)
    assert all(count_tokens(chunk) <= chunk_tokens for chunk in chunks)
    # the new parts of the chunks, in order, are the text (blanks aside)
    bodies = "".join(text[s.body : s.end] for s in spans)
    assert "".join(bodies.split()) == "".join(text.split())
    for previous, span in zip(spans, spans[1:], strict=False):
        assert previous.end <= span.body and span.start <= span.body
        assert span.start >= previous.start  # the overlap comes from the previous chunk's end
