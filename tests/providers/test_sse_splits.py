"""The SSE parser the product and the bench clients share: framing rules, and any split of the bytes parses the same."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agentos.providers.sse_parser import SSEEvent, SSEParser

STREAM = (
    b": a comment\n"
    b'event: turn.started\nid: 1\ndata: {"turn_id": "t1"}\n\n'
    b'event: token\r\nid: 2\r\ndata: {"delta": "h\xc3\xa9"}\r\n\r\n'
    b"data: line one\rdata:line two\r\r"
    b"event: turn.completed\nid: 3\ndata: {}\n\n"
)
EXPECTED = [
    SSEEvent(event="turn.started", data='{"turn_id": "t1"}', id="1"),
    SSEEvent(event="token", data='{"delta": "hé"}', id="2"),
    SSEEvent(event="message", data="line one\nline two", id="2"),
    SSEEvent(event="turn.completed", data="{}", id="3"),
]


def test_parses_events_with_every_line_ending() -> None:
    assert SSEParser().feed(STREAM) == EXPECTED


def test_event_without_data_is_not_dispatched() -> None:
    parser = SSEParser()
    assert parser.feed(b"event: ping\n\n") == []
    assert parser.feed(b"data: x\n\n") == [SSEEvent(event="message", data="x")]


def test_incomplete_event_waits_for_the_blank_line() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: [DONE]\n") == []
    assert parser.feed(b"\n") == [SSEEvent(event="message", data="[DONE]")]


def test_lone_cr_at_the_end_waits_for_a_possible_lf() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: a\r") == []
    assert parser.feed(b"\n\r\n") == [SSEEvent(event="message", data="a")]


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_any_split_gives_the_same_events(cuts: list[int]) -> None:
    parser = SSEParser()
    bounds = [0, *sorted(cuts), len(STREAM)]
    events = []
    for start, end in zip(bounds, bounds[1:], strict=False):
        events += parser.feed(STREAM[start:end])
    assert events == EXPECTED
