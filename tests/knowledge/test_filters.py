"""The metadata filter rules and the full-text words, shared by both stores and the vector mask."""

from __future__ import annotations

from typing import Any

import pytest

from agentos.errors import InvalidInput
from agentos.knowledge import filters


@pytest.mark.parametrize(
    "raw",
    [
        [],
        "team",
        {"": 1},
        {"a b": 1},
        {"k" * 65: 1},
        {"k": None},
        {"k": [1]},
        {"k": {"$in": []}},
        {"k": {"$in": "a"}},
        {"k": {"$nin": [1]}},
        {"k": {"$in": [1], "x": 2}},
        {"k": {"$in": [[1]]}},
        {"k": float("nan")},
        {"k": "x" * 1025},
        {"k": "nul\x00"},
        {"k": 2**63},
        {"k": {"$in": [-(2**63)]}},
        {f"k{i}": 1 for i in range(17)},
        {"k": {"$in": list(range(101))}},
    ],
)
def test_bad_filters_are_refused(raw: Any) -> None:
    with pytest.raises(InvalidInput) as refused:
        filters.parse_filter(raw)
    assert refused.value.message.startswith("filter")


def test_parse_normalises() -> None:
    assert filters.parse_filter(None) == {}
    assert filters.parse_filter({"a.b-c_1": "x", "n": {"$in": [1, True]}}) == {"a.b-c_1": ("x",), "n": (1, True)}


def test_matches_keeps_types_apart() -> None:
    meta = {"flag": True, "n": 1, "s": "1", "f": 2.5, "none": None, "list": [1]}
    assert filters.matches(meta, None)
    assert filters.matches(meta, {})
    assert filters.matches(meta, {"flag": True, "n": 1.0, "s": "1"})
    assert filters.matches(meta, {"f": {"$in": ["x", 2.5]}})
    assert not filters.matches(meta, {"flag": 1})
    assert not filters.matches(meta, {"n": True})
    assert not filters.matches(meta, {"s": 1})
    assert not filters.matches(meta, {"n": "1"})
    assert not filters.matches(meta, {"missing": 1})
    assert not filters.matches(meta, {"list": 1})
    assert not filters.matches(meta, {"none": "x"})
    parsed = filters.parse_filter({"n": {"$in": [2, 1]}})
    assert filters.matches(meta, parsed)
    with pytest.raises(InvalidInput):
        filters.matches(meta, {"bad key": 1})


def test_check_metadata() -> None:
    assert filters.check_metadata({"team": "a", "n": 1, "x": None}) == {"team": "a", "n": 1, "x": None}
    assert filters.check_metadata(None) == {}
    for bad in ([1], {"a b": 1}, {"k": {"nested": 1}}, {"k": [1]}):
        with pytest.raises(InvalidInput) as refused:
            filters.check_metadata(bad)
        assert refused.value.message.startswith("metadata")


def test_words_drop_every_operator() -> None:
    assert filters.words('"Kafka*" NEAR(lag, 2) -x foo_bar ü日本') == [
        "kafka",
        "near",
        "lag",
        "2",
        "x",
        "foo",
        "bar",
        "ü日本",
    ]
    assert filters.words("*** ( ) \" ' - ^ :") == []
    assert filters.fts5_or(filters.words("x b x")) == '"x" OR "b"'
    assert len(filters.words(" ".join(f"w{i}" for i in range(100)))) == filters.MAX_WORDS
    assert filters.words("y" * 500) == ["y" * filters.MAX_WORD]


def test_stopwords_are_not_searched_unless_the_query_has_nothing_else() -> None:
    assert filters.search_words("How do I reset the Router?") == ["reset", "router"]
    assert filters.search_words("what is the kafka lag") == ["kafka", "lag"]
    # only stopwords: searched as they are (the query names nothing else)
    assert filters.search_words("The Who") == ["the", "who"]
    assert filters.search_words("to be or not") == ["not"]
    assert filters.search_words("?!") == []
