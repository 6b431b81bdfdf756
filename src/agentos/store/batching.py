"""When a writer commits: the batching policy, pure (no threads, no clock reads).

Theory of operation. Items arrive with the time they were seen (`add(item, now)`); the
writer asks `take(now)` for a batch and sleeps until `due_at()` when it gets none.

- Idle (the last batch was taken more than `busy_window_s` before the oldest pending item
  arrived): the pending items are due at once, so a lone turn pays no waiting window.
- Busy (a batch was taken within `busy_window_s`): they are due `linger_s` after the oldest
  one arrived, so the batch fills and many turns share one transaction (group commit).
- Full (`max_items` pending): due at once, whatever the load.
- At once (an item added with `at_once`, a read someone waits for): due at once, with the
  items before it (they are applied first: the read sees them), whatever the load.

A batch holds at most `max_items`; the rest wait for the next `take`, timed from that take.
`take(now, flush=True)` ignores the window (closing drains everything).

    batcher = Batcher[str](max_items=2, linger_s=0.002, busy_window_s=0.02)
    batcher.add("a", now=0.0)
    batcher.take(now=0.0)        # ["a"]: idle, due at once
    batcher.add("b", now=0.001)
    batcher.take(now=0.001)      # None: busy, due at 0.003
    batcher.take(now=0.003)      # ["b"]
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Batcher(Generic[T]):
    """A FIFO of pending items and the rule that says when they form a batch.

    Args:
        max_items: the most items in one batch.
        linger_s: under load, how long the oldest pending item may wait for the batch to fill.
        busy_window_s: a batch taken this recently means the writer is under load.
    """

    __slots__ = ("_items", "_max", "_linger_s", "_busy_window_s", "_first_at", "_last_take_at", "_at_once")

    def __init__(self, *, max_items: int, linger_s: float, busy_window_s: float = 0.02) -> None:
        assert max_items >= 1 and linger_s >= 0 and busy_window_s >= 0
        self._items: deque[T] = deque()
        self._max = max_items
        self._linger_s = linger_s
        self._busy_window_s = busy_window_s
        self._first_at = 0.0  # when the oldest pending item arrived (meaningful while any is pending)
        self._last_take_at = -math.inf
        self._at_once = False  # an at-once item is pending (or may be: cleared when all are taken)

    def __len__(self) -> int:
        return len(self._items)

    def add(self, item: T, now: float, *, at_once: bool = False) -> None:
        if not self._items:
            self._first_at = now
        self._items.append(item)
        self._at_once = self._at_once or at_once

    def due_at(self) -> float | None:
        """When the pending items form a batch; None when nothing is pending."""
        if not self._items:
            return None
        if self._at_once or len(self._items) >= self._max or self._first_at - self._last_take_at >= self._busy_window_s:
            return self._first_at
        return self._first_at + self._linger_s

    def take(self, now: float, *, flush: bool = False) -> list[T] | None:
        """The next batch if it is due at `now` (any pending one with `flush`), else None."""
        due = self.due_at()
        if due is None or (now < due and not flush):
            return None
        items = self._items
        batch = [items.popleft() for _ in range(min(len(items), self._max))]
        self._last_take_at = now
        self._first_at = now  # the rest, if any, are timed from this take
        self._at_once = self._at_once and bool(items)
        return batch

    def requeue(self, items: list[T], now: float) -> None:
        """Put `items` (a batch that could not be applied) back before every pending item, in
        their order: the writes queued after them still go after them."""
        if not items:
            return
        self._items.extendleft(reversed(items))
        self._first_at = now

    def remove(self, match: Callable[[T], bool]) -> list[T]:
        """Remove and return the pending items `match` holds for; the rest keep their order."""
        removed: list[T] = []
        rest: deque[T] = deque()
        for item in self._items:
            (removed if match(item) else rest).append(item)
        self._items = rest
        return removed

    def clear(self) -> list[T]:
        """Remove and return every pending item (a dead writer fails them)."""
        items = list(self._items)
        self._items.clear()
        self._at_once = False
        return items
