"""A set of deadlines keyed by id, with removal that frees memory at once.

Theory of operation
-------------------
Human deadlines come and go in any order (a run is answered, cancelled, or times out), so the
FIFO that serves the permit waiters will not do. A binary heap orders them; `remove()` forgets the
key in `_live` (O(1)) and leaves a dead entry in the heap. Two rules keep the heap honest:

- its top is always live (dead tops are popped at once), so `next()` is a peek;
- whenever it holds more than twice the live entries it is rebuilt from them (O(n), amortised
  O(1) per removal), so its size stays bounded by the live count: an answered deadline never
  waits in memory until it would have expired (issue #7, defect 5).

A key may come back after its removal (a run waits for a human again): each entry carries a
sequence number, and only the entry whose number `_live` holds counts.
"""

from __future__ import annotations

import heapq


class DeadlineSet:
    __slots__ = ("_heap", "_live", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, str]] = []
        self._live: dict[str, tuple[float, int]] = {}
        self._seq = 0

    def __len__(self) -> int:
        return len(self._live)

    @property
    def heap_size(self) -> int:
        """Entries held, dead ones included: never more than twice `len(self)`."""
        return len(self._heap)

    def get(self, key: str) -> float | None:
        entry = self._live.get(key)
        return entry[0] if entry is not None else None

    def add(self, key: str, deadline_s: float) -> None:
        assert key not in self._live, f"deadline {key!r} added twice"
        self._seq += 1
        self._live[key] = (deadline_s, self._seq)
        heapq.heappush(self._heap, (deadline_s, self._seq, key))

    def remove(self, key: str) -> bool:
        """Forget `key`'s deadline; False if it had none."""
        if self._live.pop(key, None) is None:
            return False
        self._tidy()
        return True

    def next(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now: float) -> str | None:
        """Remove and return the key of the earliest deadline at or before `now`, or None.

        One at a time: acting on one expiry may remove others (a cascade), and those must not
        be handed out afterwards."""
        if not self._heap or self._heap[0][0] > now:
            return None
        deadline_s, seq, key = heapq.heappop(self._heap)
        assert self._live[key] == (deadline_s, seq)  # _tidy keeps the top live
        del self._live[key]
        self._tidy()
        return key

    def _tidy(self) -> None:
        if len(self._heap) > 2 * len(self._live):
            self._heap = [(d, seq, key) for key, (d, seq) in self._live.items()]
            heapq.heapify(self._heap)
        while self._heap and not self._is_live(self._heap[0]):
            heapq.heappop(self._heap)

    def _is_live(self, entry: tuple[float, int, str]) -> bool:
        return self._live.get(entry[2]) == (entry[0], entry[1])
