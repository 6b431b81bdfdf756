"""Token-aware chunks with overlap.

No tokenizer vocabulary can be downloaded here (tiktoken fetches its BPE files at first use), so
tokens are estimated by one regular expression, `count_tokens`. The estimate is built to be
*subadditive*: the count of a concatenation is at most the sum of the counts of its parts. That
is what lets the splitter add up the counts of the pieces it joins and be sure that a chunk is
within its limit without counting it again.

The splitter cuts at the largest boundary that fits: paragraphs (blank lines, Markdown
headings), then lines, then sentences, then words, then a hard cut between estimated tokens.
The pieces are packed greedily into bodies of `chunk_tokens - overlap` tokens, and each chunk is
the previous chunk's last ~`overlap` tokens (from a word start) followed by its body, so each
chunk is one contiguous span of the text. Every step is linear in the text (a few regex passes).
"""

from __future__ import annotations

import bisect
import itertools
import re
from typing import NamedTuple

# One match per estimated token:
#   a run of ASCII letters, 6 letters a token (common English words are one cl100k token; long or
#   rare words split, and the estimate over-counts words of 7..12 letters that are one token);
#   a run of digits, 3 a token (cl100k splits numbers into groups of at most 3 digits);
#   a run of whitespace holding a line break, one token (indentation runs are one token or so);
#   each other non-ASCII character, one token (about right for CJK; over-counts accented Latin);
#   each punctuation mark, one token (cl100k merges some, e.g. "...": an over-count).
# Blanks between words are not counted: cl100k folds a leading space into the word (" the").
# Not measured against cl100k here (no vocabulary); by construction it leans to over-counting
# English prose (by roughly 10-30 %), which is the safe side for a limit: chunks come out a little
# smaller than asked, never larger than a model's input.
_TOKEN = re.compile(r"[A-Za-z]{1,6}|[0-9]{1,3}|\n\s*|[^\x00-\x7f]|[^\sA-Za-z0-9]")

# Boundaries, largest first; a piece starts at each match's end.
_LEVELS = (
    re.compile(r"\n[ \t]*\n\s*|\n(?=[ \t]{0,3}#{1,6}[ \t])"),  # paragraphs, Markdown headings
    re.compile(r"\n\s*"),  # lines (lists, code, verse)
    re.compile(r"[.!?\u3002\uff01\uff1f\u2026]+[\"'\u201d\u2019)\]]*\s+"),  # sentences
)
_BLANKS = re.compile(r"\s+")
# the overlap is looked for in at most this many characters per token of it
_OVERLAP_CHARS_PER_TOKEN = 8
# a span shorter than this many characters per token of the limit is counted whole (findall is fast)
_CHARS_COUNTED_AT_ONCE = 16


class ChunkSpan(NamedTuple):
    """A chunk as offsets into the text: `text[start:end]` is the chunk (no blanks around it);
    its new text begins at `body` (before it, the overlap with the previous chunk)."""

    start: int
    body: int
    end: int


def count_tokens(text: str) -> int:
    """An estimate of the tokens a BPE tokenizer makes of `text` (no vocabulary is downloaded).
    See the module for the estimate and how far it is from cl100k."""
    return len(_TOKEN.findall(text))


def _count(text: str, start: int, end: int) -> int:
    return len(_TOKEN.findall(text, start, end))


def _count_upto(text: str, start: int, end: int, limit: int) -> int:
    """The tokens of text[start:end], or `limit + 1` when there are more than `limit`: a piece
    far over the limit is not counted to its end at every level it is split again."""
    if end - start <= limit * _CHARS_COUNTED_AT_ONCE:
        return _count(text, start, end)
    return sum(1 for _ in itertools.islice(_TOKEN.finditer(text, start, end), limit + 1))


def split(text: str, chunk_tokens: int, overlap_tokens: int) -> list[str]:
    """Chunks of at most `chunk_tokens` (estimated) each, cut at the largest boundary that fits
    (heading/paragraph, then sentence, then word, then a hard cut), each starting with about
    `overlap_tokens` of the previous one's end. Empty text gives []."""
    return [text[span.start : span.end] for span in chunk_spans(text, chunk_tokens, overlap_tokens)]


def chunk_spans(text: str, chunk_tokens: int, overlap_tokens: int) -> list[ChunkSpan]:
    """`split`'s chunks as offsets. The overlap is clamped to half a chunk (an overlap as large
    as the chunk would leave no room for new text); chunks of blanks only are left out."""
    if chunk_tokens < 1:
        raise ValueError("chunk_tokens must be at least 1")
    overlap = max(0, min(overlap_tokens, chunk_tokens // 2))
    body_limit = chunk_tokens - overlap
    pieces: list[tuple[int, int, int]] = []
    _pieces(text, 0, len(text), 0, body_limit, pieces)
    spans: list[ChunkSpan] = []
    previous_body = 0
    for start, end in _pack(pieces, body_limit):
        chunk_start = _overlap_start(text, previous_body, start, overlap) if spans else start
        previous_body = start
        span = _strip(text, chunk_start, start, end)
        if span is not None:
            spans.append(span)
    return spans


def _pieces(text: str, start: int, end: int, level: int, limit: int, out: list[tuple[int, int, int]]) -> None:
    """Append (start, end, tokens) of consecutive pieces of text[start:end], each within `limit`."""
    if level == len(_LEVELS):
        _cut_words(text, start, end, limit, out)
        return
    cuts = [m.end() for m in _LEVELS[level].finditer(text, start, end) if start < m.end() < end]
    for piece_start, piece_end in zip([start, *cuts], [*cuts, end], strict=True):
        tokens = _count_upto(text, piece_start, piece_end, limit)
        if tokens <= limit:
            out.append((piece_start, piece_end, tokens))
        else:
            _pieces(text, piece_start, piece_end, level + 1, limit, out)


def _cut_words(text: str, start: int, end: int, limit: int, out: list[tuple[int, int, int]]) -> None:
    """Cut text[start:end] into pieces of at most `limit` tokens: at the last word start before
    the limit, or between two tokens when one word alone is over it. Cuts fall on token starts,
    so a piece's tokens are exactly the text's tokens that start in it."""
    starts = [m.start() for m in _TOKEN.finditer(text, start, end)]
    first = 0  # index in `starts` of the piece's first token
    piece_start = start
    while len(starts) - first > limit:
        hard = starts[first + limit]  # the first token that does not fit
        blank = _last_word_start(text, piece_start, hard)
        cut = blank if blank is not None else hard
        taken = bisect.bisect_left(starts, cut, first) - first
        out.append((piece_start, cut, taken))
        piece_start, first = cut, first + taken
    out.append((piece_start, end, len(starts) - first))


def _last_word_start(text: str, start: int, end: int) -> int | None:
    """The last position in (start, end] that follows a blank and starts a word, if any."""
    i = end
    while i > start:
        if not text[i].isspace() and text[i - 1].isspace():
            return i
        i -= 1
    return None


def _pack(pieces: list[tuple[int, int, int]], limit: int) -> list[tuple[int, int]]:
    """Consecutive pieces joined greedily into bodies of at most `limit` tokens (the count of a
    join is at most the sum of its pieces' counts: see the module)."""
    bodies: list[tuple[int, int]] = []
    body_start: int | None = None
    body_end = tokens = 0
    for start, end, count in pieces:
        if body_start is not None and tokens + count > limit:
            bodies.append((body_start, body_end))
            body_start = None
        if body_start is None:
            body_start, tokens = start, 0
        body_end, tokens = end, tokens + count
    if body_start is not None:
        bodies.append((body_start, body_end))
    return bodies


def _overlap_start(text: str, low: int, body: int, tokens: int) -> int:
    """The earliest word start in text[low:body] from which at most `tokens` tokens remain
    before `body` (`body` itself when none)."""
    if tokens <= 0:
        return body
    window = max(low, body - tokens * _OVERLAP_CHARS_PER_TOKEN)
    starts = [m.end() for m in _BLANKS.finditer(text, window, body) if m.end() < body]
    if window == low:
        starts.insert(0, low)
    # counts fall as the start moves right: find the leftmost start within the budget
    lo, hi = 0, len(starts)
    while lo < hi:
        mid = (lo + hi) // 2
        if _count(text, starts[mid], body) <= tokens:
            hi = mid
        else:
            lo = mid + 1
    return starts[lo] if lo < len(starts) else body


def _strip(text: str, start: int, body: int, end: int) -> ChunkSpan | None:
    """The span without blanks at either end; None when the new text is blanks only."""
    if not text[body:end].strip():
        return None
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return ChunkSpan(start, max(body, start), end)
