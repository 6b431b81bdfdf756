"""How text becomes the words the full-text index holds and a query searches.

Tokens: runs of letters and digits (`filters.words` reads the query the same way), lower-cased,
accents folded, at most `filters.MAX_WORD` characters (a longer run is split), so a query word
and the text's word agree exactly.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

from agentos.knowledge import filters

_TOKEN = re.compile(rf"[^\W_]{{1,{filters.MAX_WORD}}}")
# The same tokens in ASCII text, 40% faster to find (no Unicode class to test each character
# against): most of a collection's first load is spent tokenizing its chunks.
_ASCII_TOKEN = re.compile(rf"[a-z0-9]{{1,{filters.MAX_WORD}}}")
# A batch is tokenized as one string, its texts joined by NUL: one `lower` and one `findall` for
# the batch instead of one per chunk (0.29 against 0.46 s of CPU at 30,000 chunks). NUL is no
# token character and is not case-ignorable, so each text's tokens (and `lower`'s context rules,
# such as a final sigma) stop at it exactly as at the text's end; the patterns also match it, so
# the token stream marks where each text ends.
END = "\x00"
_BATCH_TOKEN = re.compile(rf"[^\W_]{{1,{filters.MAX_WORD}}}|{END}")
_ASCII_BATCH_TOKEN = re.compile(rf"[a-z0-9]{{1,{filters.MAX_WORD}}}|{END}")


def tokens(text: str) -> list[str]:
    """The words of `text` as the index holds them."""
    if text.isascii():
        return _ASCII_TOKEN.findall(text.lower())
    return _TOKEN.findall(_fold(text).lower())


def query_terms(query: str) -> list[str]:
    """The words a query searches (`filters.search_words`: stopwords out unless only stopwords),
    folded like the text's, in the query's order, each once."""
    folded = (_fold(w) if not w.isascii() else w for w in filters.search_words(query))
    return list(dict.fromkeys(t for w in folded for t in _TOKEN.findall(w)))


def _fold(text: str) -> str:
    """Accents off (`é` -> `e`), as FTS5's unicode61 tokenizer does by default."""
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def batch_tokens(texts: Sequence[str]) -> list[str]:
    """Every text's `tokens`, each text's followed by one `END`, in one pass over the batch."""
    joined = END.join(texts) + END
    if joined.count(END) != len(texts):  # a text holds a NUL: a separator like any other
        joined = END.join(t.replace(END, " ") for t in texts) + END
    if joined.isascii():
        return _ASCII_BATCH_TOKEN.findall(joined.lower())
    folded = END.join(t if t.isascii() else _fold(t) for t in joined[:-1].split(END)) + END
    return _BATCH_TOKEN.findall(folded.lower())
