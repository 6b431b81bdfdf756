from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agentos.api.sse import encode_event
from agentos.providers.sse_parser import SSEEvent, SSEParser


def test_events_comments_ids_and_multiline_data() -> None:
    p = SSEParser()
    stream = b": comment\nevent: token\nid: 7\ndata: a\ndata: b\n\ndata: plain\n\n"
    assert p.feed(stream) == [SSEEvent("a\nb", "token", "7"), SSEEvent("plain", "message", "7")]


def test_crlf_cr_and_split_chunks() -> None:
    p = SSEParser()
    assert p.feed(b"data: x\r") == []
    assert p.feed(b"\n\r\n") == [SSEEvent("x")]
    assert p.feed(b"data: y\r\rdata:z\n") == [SSEEvent("y")]
    assert p.feed(b"\n") == [SSEEvent("z")]


def test_odd_fields_are_ignored_and_empty_events_dropped() -> None:
    p = SSEParser()
    assert p.feed(b"event: nothing\n\nretry: 5\nbogus\nid: a\0b\ndata\n\n") == [SSEEvent("")]


@given(
    st.lists(st.tuples(st.sampled_from(["token", "turn.started"]), st.text(max_size=20)), max_size=10),
    st.integers(min_value=1, max_value=7),
)
def test_any_chunking_of_our_own_stream_parses_back(events: list[tuple[str, str]], size: int) -> None:
    import msgspec

    raw = b"".join(encode_event(f"t:{i}", name, {"delta": text}) for i, (name, text) in enumerate(events))
    p = SSEParser()
    parsed = []
    for i in range(0, len(raw), size):
        parsed += p.feed(raw[i : i + size])
    assert [(e.event, msgspec.json.decode(e.data)["delta"], e.id) for e in parsed] == [
        (name, text, f"t:{i}") for i, (name, text) in enumerate(events)
    ]
