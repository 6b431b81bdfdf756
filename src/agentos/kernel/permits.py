"""The provider permit pool: who may open an upstream stream, and who waits in line.

Theory of operation
-------------------
`concurrency_limit` permits are shared by session turns and by the streams of agent runs (their
model calls). A holder keeps its permit from the grant until it is released, cancelled holders
included: the upstream is busy until it is really closed.

Waiters form one FIFO (a dict in insertion order). Every waiter waits the same
`permit_wait_timeout_s` and `now` never goes backwards, so insertion order is also deadline
order: expiry looks only at the front. A waiter that no longer wants a permit (cancelled, its
run stopped) is withdrawn at once, so the line holds live waiters only and a freed permit goes
straight to the next one that will use it.

The pool knows ids only; what a grant or an expiry means for a turn is `turns.py`'s business.
"""

from __future__ import annotations


class PermitPool:
    __slots__ = ("_holders", "_limit", "_timeout_s", "_waiting")

    def __init__(self, limit: int, wait_timeout_s: float) -> None:
        self._limit = limit
        self._timeout_s = wait_timeout_s
        self._holders: set[str] = set()
        self._waiting: dict[str, float] = {}  # holder id -> deadline, in deadline order

    @property
    def in_use(self) -> int:
        return len(self._holders)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def holds(self, holder_id: str) -> bool:
        return holder_id in self._holders

    def request(self, holder_id: str, now: float) -> bool:
        """Grant at once (True) if a permit is free and nobody waits; else join the line."""
        if len(self._holders) < self._limit and not self._waiting:
            self._holders.add(holder_id)
            return True
        self._waiting[holder_id] = now + self._timeout_s
        return False

    def release(self, holder_id: str) -> list[str]:
        """Give the permit back (a no-op for a non-holder); returns the waiters granted now."""
        if holder_id not in self._holders:
            return []
        self._holders.discard(holder_id)
        granted: list[str] = []
        while self._waiting and len(self._holders) < self._limit:
            waiter = next(iter(self._waiting))
            del self._waiting[waiter]
            self._holders.add(waiter)
            granted.append(waiter)
        return granted

    def withdraw(self, holder_id: str) -> None:
        """Leave the line (a no-op for a non-waiter)."""
        self._waiting.pop(holder_id, None)

    def next_deadline(self) -> float | None:
        for deadline_s in self._waiting.values():
            return deadline_s
        return None

    def expire(self, now: float) -> list[str]:
        """Take the waiters whose deadline has come out of the line; returns them in order."""
        expired: list[str] = []
        for holder_id, deadline_s in self._waiting.items():
            if deadline_s > now:
                break
            expired.append(holder_id)
        for holder_id in expired:
            del self._waiting[holder_id]
        return expired
