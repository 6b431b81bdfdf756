"""Metadata filters and full-text words: parsed and checked once, at the edge, then evaluated
in Python (the in-memory indexes' document masks) or, for the bench's FTS5 reference
(`agentos_bench.micro.fts_relevance`), turned into SQLite SQL.

A filter is `{"key": value, ...}`: every key must match. A value is a string, a number or a
boolean, compared for equality with the document's metadata value of that key, or
`{"$in": [values]}` (any of them). Types never mix: `true` does not equal `1`, `"1"` does not
equal `1`; `1` equals `1.0` (JSON has one number type). A document without the key, or with a
list, object or null there, does not match.

Why here and not in each index: the in-memory masks and the SQL must agree on exactly these
rules, and user input must reach SQL only as bound parameters (`key` goes in as a parameter too,
never into the statement text).

Full text: `words()` keeps the letters and digits of the user's query (every other character,
`"`, `*`, `-`, `(`, `NEAR`'s parentheses, is a separator), so no query syntax is ever passed
through; a search ORs the words (any word matches). English stopwords are left out of the
search (`search_words`): they match nearly every chunk, so searching them costs a walk over most
of the index and ranks nothing (their weight in bm25 is about zero); a query made only of
stopwords still searches them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from agentos.errors import InvalidInput
from agentos.knowledge.records import DocumentRow

Scalar = str | int | float | bool
Filter = dict[str, tuple[Scalar, ...]]  # key -> the values any of which matches

KEY = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
MAX_KEYS = 16
MAX_IN = 100
MAX_STRING = 1024
MAX_INT = 2**63 - 1
MAX_WORDS = 32
MAX_WORD = 64
_WORD = re.compile(r"[^\W_]+")
# The commonest English function words (a fixed list, the same for both stores).
STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "been",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "for",
        "from",
        "had",
        "has",
        "have",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "me",
        "my",
        "of",
        "on",
        "or",
        "our",
        "so",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "to",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
    ]
)


def parse_filter(raw: Any) -> Filter:
    """The checked, normalised form of a request's `filter` (None or {}: no filter).

    Raises:
        InvalidInput: not an object, too many keys, a bad key, or a value that is not a
            string, number, boolean or `{"$in": [...]}` of them.
    """
    items = _object(raw, "filter", "metadata key -> value", MAX_KEYS)
    return {_key(k, "filter"): _values(k, v) for k, v in items}


def _object(raw: Any, where: str, of: str, max_keys: int) -> list[tuple[Any, Any]]:
    """The items of `raw`, an object (None: no items) of at most `max_keys` keys.

    Raises:
        InvalidInput: not an object, or too many keys."""
    if raw is None:
        return []
    if not isinstance(raw, Mapping):
        raise InvalidInput(f"{where}: must be an object of {of}")
    if len(raw) > max_keys:
        raise InvalidInput(f"{where}: at most {max_keys} keys")
    return list(raw.items())


def _key(key: Any, where: str) -> str:
    if not isinstance(key, str) or not KEY.match(key):
        raise InvalidInput(f"{where}: key {str(key)[:80]!r} must be 1-64 of A-Z a-z 0-9 _ . -")
    return key


def _values(key: str, value: Any) -> tuple[Scalar, ...]:
    if isinstance(value, Mapping):
        if set(value) != {"$in"} or not isinstance(value["$in"], list):
            raise InvalidInput(f'filter.{key}: an object must be {{"$in": [values]}}')
        values = value["$in"]
        if not 1 <= len(values) <= MAX_IN:
            raise InvalidInput(f"filter.{key}: $in takes 1 to {MAX_IN} values")
        return tuple(_scalar(f"filter.{key}", v) for v in values)
    return (_scalar(f"filter.{key}", value),)


def _scalar(where: str, value: Any) -> Scalar:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        if not -MAX_INT <= value <= MAX_INT:  # what SQLite's integers hold
            raise InvalidInput(f"{where}: an integer must be within +-(2**63 - 1)")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidInput(f"{where}: a number must be finite")
        return value
    if isinstance(value, str):
        if len(value) > MAX_STRING:
            raise InvalidInput(f"{where}: a string is at most {MAX_STRING} characters")
        if "\x00" in value:  # PostgreSQL's jsonb holds no NUL: refused alike on both stores
            raise InvalidInput(f"{where}: a string must not contain NUL")
        return value
    raise InvalidInput(f"{where}: a value must be a string, number or boolean")


def check_metadata(raw: Any, *, max_keys: int = 64) -> dict[str, Scalar | None]:
    """A document's `metadata`: an object of key -> string, number, boolean or null, with the
    keys a filter may name.

    Raises:
        InvalidInput: anything else.
    """
    items = _object(raw, "metadata", "key -> value", max_keys)
    return {_key(k, "metadata"): None if v is None else _scalar(f"metadata.{k}", v) for k, v in items}


def refuse_nul(document: DocumentRow) -> None:
    """A document's text fields hold no NUL (PostgreSQL's text cannot; refused alike on both stores).

    Raises:
        InvalidInput: naming the field.
    """
    for name in ("title", "content_type", "idempotency_key"):
        value = getattr(document, name)
        if value is not None and "\x00" in value:
            raise InvalidInput(f"{name}: must not contain NUL")


def same(a: Any, b: Scalar) -> bool:
    """Equality under the filter's rules (booleans, numbers and strings never equal each other)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(b, str):
        return isinstance(a, str) and a == b
    return isinstance(a, int | float) and a == b


def matches(metadata: Mapping[str, Any], metadata_filter: Mapping[str, Any] | None) -> bool:
    """Whether a document's metadata passes the filter (raw or parsed; raw is checked).

    Raises:
        InvalidInput: a raw filter that `parse_filter` refuses.
    """
    parsed = _as_parsed(metadata_filter)
    return all(any(same(metadata.get(key), v) for v in values) for key, values in parsed.items())


def _as_parsed(metadata_filter: Mapping[str, Any] | None) -> Filter:
    if not metadata_filter:
        return {}
    if all(isinstance(v, tuple) for v in metadata_filter.values()):
        return dict(metadata_filter)  # already parsed: key -> tuple of scalars
    return parse_filter(metadata_filter)


# --- SQL ---------------------------------------------------------------------------------


def sqlite_where(metadata_filter: Mapping[str, Any] | None, column: str = "d.metadata") -> tuple[str, list[Any]]:
    """The filter as an SQLite condition on a JSON text `column` ("1" for none) and its parameters.

    `json_extract` gives `true` as 1, so each value is compared together with its `json_type`."""
    parsed = _as_parsed(metadata_filter)
    if not parsed:
        return "1", []
    clauses, params = [], []
    for key, values in parsed.items():
        path = f'$."{key}"'  # quoted: a key with dots is one key, not a nested path
        alternatives = []
        for value in values:
            kind, sql_value = _sqlite_kind(value)
            alternatives.append(f"(json_type({column}, ?) IN ({kind}) AND json_extract({column}, ?) = ?)")
            params += [path, path, sql_value]
        clauses.append("(" + " OR ".join(alternatives) + ")")
    return " AND ".join(clauses), params


def _sqlite_kind(value: Scalar) -> tuple[str, Any]:
    if isinstance(value, bool):
        return ("'true'" if value else "'false'"), int(value)
    if isinstance(value, str):
        return "'text'", value
    return "'integer', 'real'", value


# --- full text ---------------------------------------------------------------------------


def words(query: str) -> list[str]:
    """The searchable words of a user's query: runs of letters and digits, lower-cased, at most
    `MAX_WORDS` distinct ones of at most `MAX_WORD` characters; [] when it has none."""
    seen: dict[str, None] = {}
    for match in _WORD.finditer(query):
        word = match.group().lower()[:MAX_WORD]
        seen.setdefault(word, None)
        if len(seen) == MAX_WORDS:
            break
    return list(seen)


def search_words(query: str) -> list[str]:
    """The words a full-text search looks for: `words()` without stopwords, or all of them when
    every one is a stopword (such a query still finds what it names)."""
    found = words(query)
    return [w for w in found if w not in STOPWORDS] or found


def fts5_or(searched: list[str]) -> str:
    """An FTS5 MATCH expression of `search_words` output: each quoted (a word holds no quote), OR-ed."""
    return " OR ".join(f'"{w}"' for w in searched)
