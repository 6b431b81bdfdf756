"""The batching policy with plain floats for time: no thread, no clock, no event loop."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agentos.store.batching import Batcher
from agentos.store.retry import RETRY_FIRST_S, RETRY_MAX_S, Backoff

LINGER = 0.002
BUSY = 0.02


def batcher(max_items: int = 10) -> Batcher[str]:
    return Batcher(max_items=max_items, linger_s=LINGER, busy_window_s=BUSY)


def test_nothing_pending_is_never_due() -> None:
    b = batcher()
    assert b.due_at() is None
    assert b.take(100.0) is None
    assert b.take(100.0, flush=True) is None


def test_an_idle_writer_takes_a_lone_item_at_once() -> None:
    b = batcher()
    b.add("a", now=5.0)
    assert b.due_at() == 5.0
    assert b.take(5.0) == ["a"]
    assert len(b) == 0


def test_under_load_items_linger_so_the_batch_fills() -> None:
    b = batcher()
    b.add("a", now=1.0)
    assert b.take(1.0) == ["a"]
    b.add("b", now=1.001)  # 1 ms after a take: busy
    b.add("c", now=1.002)
    assert b.due_at() == 1.001 + LINGER
    assert b.take(1.002) is None
    assert b.take(1.001 + LINGER) == ["b", "c"]


def test_the_writer_is_idle_again_after_the_busy_window() -> None:
    b = batcher()
    b.add("a", now=1.0)
    assert b.take(1.0) == ["a"]
    b.add("b", now=1.0 + BUSY)
    assert b.take(1.0 + BUSY) == ["b"]


def test_a_full_batch_is_due_at_once_even_under_load() -> None:
    b = batcher(max_items=3)
    b.add("x", now=0.0)
    b.take(0.0)
    for item in ("a", "b", "c", "d"):
        b.add(item, now=0.001)
    assert b.due_at() == 0.001
    assert b.take(0.001) == ["a", "b", "c"]
    # the rest is timed from that take, and lingers: the writer is busy
    assert b.due_at() == 0.001 + LINGER
    assert b.take(0.001 + LINGER) == ["d"]


def test_flush_ignores_the_window() -> None:
    b = batcher()
    b.add("a", now=0.0)
    b.take(0.0)
    b.add("b", now=0.001)
    assert b.take(0.001) is None
    assert b.take(0.001, flush=True) == ["b"]


def test_clear_hands_back_every_pending_item() -> None:
    b = batcher(max_items=1)
    for item in "abc":
        b.add(item, now=0.0)
    assert b.clear() == ["a", "b", "c"]
    assert b.due_at() is None


@given(
    st.lists(st.tuples(st.floats(0, 0.05), st.integers(0, 5)), max_size=60),
    st.integers(1, 8),
)
def test_every_item_is_taken_once_in_order_within_the_bounds(steps: list[tuple[float, int]], max_items: int) -> None:
    """Whatever the arrivals, a writer that takes at `due_at()` never waits past linger_s and loses nothing."""
    b: Batcher[int] = Batcher(max_items=max_items, linger_s=LINGER, busy_window_s=BUSY)
    now, added, taken = 0.0, 0, []
    for gap, count in steps:
        now += gap
        due = b.due_at()
        while due is not None and due <= now:  # the writer wakes at each due time on the way
            batch = b.take(due)
            assert batch is not None and 1 <= len(batch) <= max_items
            taken.extend(batch)
            due = b.due_at()
        for _ in range(count):
            b.add(added, now)
            added += 1
        due = b.due_at()
        assert due is None or due <= now + LINGER
    while (batch := b.take(now, flush=True)) is not None:
        taken.extend(batch)
    assert taken == list(range(added))


def test_requeued_items_go_first_in_their_order() -> None:
    """A batch put back (its database was unreachable) is taken again before what came after it."""
    b: Batcher[int] = Batcher(max_items=10, linger_s=LINGER, busy_window_s=BUSY)
    for i in (1, 2, 3):
        b.add(i, 0.0)
    assert b.take(0.0) == [1, 2, 3]
    b.add(4, 0.1)
    b.requeue([1, 3], 0.2)
    assert b.due_at() is not None
    assert b.take(1.0, flush=True) == [1, 3, 4]


def test_removed_items_come_out_in_order_and_the_rest_keep_theirs() -> None:
    """What a writer fails at once when the disk failed the batch before them (awaited ones)."""
    b: Batcher[int] = Batcher(max_items=10, linger_s=LINGER, busy_window_s=BUSY)
    for i in range(6):
        b.add(i, 0.0)
    assert b.remove(lambda i: i % 2 == 1) == [1, 3, 5]
    assert b.remove(lambda i: i > 100) == []
    assert b.take(1.0, flush=True) == [0, 2, 4]


def test_the_backoff_doubles_to_its_ceiling_and_starts_over_after_a_success() -> None:
    backoff = Backoff()
    waits = [backoff.failed(now=float(i)) for i in range(7)]
    assert waits == [RETRY_FIRST_S * 2**i for i in range(5)] + [RETRY_MAX_S, RETRY_MAX_S]
    assert backoff.until == 6.0 + RETRY_MAX_S
    backoff.succeeded()
    assert backoff.failed(now=10.0) == RETRY_FIRST_S and backoff.until == 10.0 + RETRY_FIRST_S


def test_an_at_once_item_is_due_now_with_those_before_it_even_under_load() -> None:
    b = batcher()
    b.add("x", now=1.0)
    b.take(1.0)
    b.add("write", now=1.001)  # busy: it would linger
    assert b.due_at() == 1.001 + LINGER
    b.add("read", now=1.0015, at_once=True)
    assert b.due_at() == 1.001  # due now, the write first (the read sees it)
    assert b.take(1.0015) == ["write", "read"]
    b.add("later", now=1.002)  # no at-once item pending any more: lingers again
    assert b.due_at() == 1.002 + LINGER


def test_an_at_once_item_past_a_full_batch_keeps_the_rest_due() -> None:
    b = batcher(max_items=2)
    b.add("x", now=0.0)
    b.take(0.0)
    for item in ("a", "b"):
        b.add(item, now=0.001)
    b.add("read", now=0.001, at_once=True)
    assert b.take(0.001) == ["a", "b"]
    assert b.due_at() == 0.001  # the read is still pending: at once, not after a linger
    assert b.take(0.001) == ["read"]
