"""Sessions in memory: each one's active turn slot and queue, and their TTL.

Theory of operation
-------------------
A session is in memory from its first turn (or `SessionOpened`) until it is deleted or idle
for `session_ttl_s`. It holds at most one active turn (`active_turn`) and a FIFO queue of turns
waiting behind it (`busy.py` decides who waits). The table is insertion-ordered by activity:
`touch` moves a session to the back, so expiry scans only the expired front, and a busy session
(an active turn) is touched rather than evicted. `queued_now` counts every queue's turns, so
statistics never scan the table.
"""

from __future__ import annotations

from collections import OrderedDict, deque


class Session:
    __slots__ = ("active_turn", "last_active_s", "queue")

    def __init__(self, now: float) -> None:
        self.active_turn: str | None = None
        self.last_active_s = now
        self.queue: deque[str] = deque()  # queued turn ids, oldest first


class Sessions:
    def __init__(self) -> None:
        self._table: OrderedDict[str, Session] = OrderedDict()
        self.queued_now = 0

    def __contains__(self, session_id: str) -> bool:
        return session_id in self._table

    def __len__(self) -> int:
        return len(self._table)

    def get(self, session_id: str) -> Session | None:
        return self._table.get(session_id)

    def __getitem__(self, session_id: str) -> Session:
        return self._table[session_id]

    def touch(self, session_id: str, now: float) -> Session:
        session = self._table.get(session_id)
        if session is None:
            session = self._table[session_id] = Session(now)
        else:
            session.last_active_s = now
            self._table.move_to_end(session_id)
        return session

    def drop(self, session_id: str) -> None:
        session = self._table.pop(session_id, None)
        assert session is None or not session.queue, "a session's queue is cancelled before it is dropped"

    # -- queues --------------------------------------------------------------------------------

    def enqueue(self, session: Session, turn_id: str) -> int:
        """Append to the session's queue; how many wait ahead of it."""
        session.queue.append(turn_id)
        self.queued_now += 1
        return len(session.queue) - 1

    def pop_next(self, session: Session) -> str:
        self.queued_now -= 1
        return session.queue.popleft()

    def remove(self, session_id: str, turn_id: str) -> None:
        self._table[session_id].queue.remove(turn_id)
        self.queued_now -= 1

    # -- TTL -----------------------------------------------------------------------------------

    def next_expiry(self, ttl_s: float) -> float | None:
        for session in self._table.values():  # the front one is the least recently active
            return session.last_active_s + ttl_s
        return None

    def expire(self, now: float, ttl_s: float) -> list[str]:
        """Drop the sessions idle for `ttl_s`; their ids. Busy ones are touched, never dropped."""
        evicted: list[str] = []
        while self._table:
            session_id, session = next(iter(self._table.items()))
            if session.last_active_s + ttl_s > now:
                break
            if session.active_turn is not None:
                self.touch(session_id, now)  # busy sessions never expire mid-turn
                continue
            del self._table[session_id]
            evicted.append(session_id)
        return evicted
