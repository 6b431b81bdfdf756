"""The bench's documents and queries: deterministic text from a seed, no downloads.

Documents are sentences of words drawn from a fixed vocabulary with a skewed (Zipf-like)
distribution, so full-text search has common and rare words as in real text, and each
document carries `{"group": "g<i mod groups>"}` metadata for the filtered queries. A query is
a run of words taken from one chunk of the corpus, so it has true near neighbours to find.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass

VOCABULARY_SIZE = 5000
GROUPS = 10  # a filter on one group keeps a tenth of the documents
_SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "po", "da", "fe", "gu", "hi", "jo", "qu")


def vocabulary(size: int = VOCABULARY_SIZE) -> list[str]:
    """`size` distinct made-up words of 2 to 4 syllables (the same list every time)."""
    rng = random.Random(7)
    words: dict[str, None] = {}
    while len(words) < size:
        words["".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 4)))] = None
    return list(words)


@dataclass(frozen=True, slots=True)
class Document:
    index: int
    title: str
    text: str
    group: str

    @property
    def metadata(self) -> dict[str, str]:
        return {"group": self.group}


class Corpus:
    """Usage::

    corpus = Corpus(seed=1)
    docs = list(corpus.documents(100, words=230))   # about 300 tokens each
    """

    def __init__(self, seed: int = 1, groups: int = GROUPS) -> None:
        self._seed = seed
        self._groups = groups
        self._words = vocabulary()
        # Zipf-like weights: word i is drawn about 1/(i+1) as often as word 0
        self._cumulative = list(itertools.accumulate(1.0 / (i + 1) for i in range(len(self._words))))

    def document(self, index: int, words: int) -> Document:
        rng = random.Random(f"{self._seed}:{index}")
        drawn = rng.choices(self._words, cum_weights=self._cumulative, k=words)
        sentences = [" ".join(drawn[i : i + 12]).capitalize() + "." for i in range(0, len(drawn), 12)]
        paragraphs = ["\n".join(sentences[i : i + 5]) for i in range(0, len(sentences), 5)]
        title = f"Document {index} " + " ".join(drawn[:3])
        return Document(index, title, "\n\n".join(paragraphs), f"g{index % self._groups}")

    def documents(self, count: int, words: int, start: int = 0) -> Iterator[Document]:
        for index in range(start, start + count):
            yield self.document(index, words)


def query_from(text: str, rng: random.Random, words: int = 8) -> str:
    """A run of `words` consecutive words of `text` (punctuation dropped)."""
    tokens = [t.strip(".,").lower() for t in text.split()]
    tokens = [t for t in tokens if t]
    if len(tokens) <= words:
        return " ".join(tokens)
    start = rng.randrange(0, len(tokens) - words)
    return " ".join(tokens[start : start + words])
