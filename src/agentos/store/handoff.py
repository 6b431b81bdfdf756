"""How the event loop hands operations to a writer thread, waking it as rarely as it can.

A deque, not a queue.Queue: an append is one atomic op with no lock and no wake-up. The thread
is woken through an Event only when it parked itself (on an empty deque, or to wait out a
retry back-off). A put (nobody awaits it) does not wake a parked thread at once: a loop timer
does, `put_linger_s` later, so the access rows, events and user messages of many turns share
one wake-up and one commit. Anything urgent (a read, an answer's commit, a close) wakes it now
and takes them along (one FIFO), so what is awaited waits for nothing.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")


class Handoff(Generic[T]):
    """`push` and `wake_up` run on the loop; the thread drains `ops` and calls `park`."""

    __slots__ = ("ops", "loop", "_wake", "_parked", "_put_linger_s", "_kick")

    def __init__(self, put_linger_s: float) -> None:
        self.ops: deque[T] = deque()
        self.loop: asyncio.AbstractEventLoop | None = None  # set when the writer starts
        self._wake = threading.Event()
        self._parked = False
        self._put_linger_s = put_linger_s
        self._kick: asyncio.TimerHandle | None = None

    @property
    def parked(self) -> bool:
        return self._parked

    def push(self, op: T, urgent: bool) -> None:
        self.ops.append(op)
        if not self._parked:
            return  # busy or lingering: it pulls the deque before it sleeps again
        if not urgent and self._put_linger_s > 0 and self.loop is not None:
            if self._kick is None:
                self._kick = self.loop.call_later(self._put_linger_s, self.wake_up)
            return
        self.wake_up()

    def wake_up(self) -> None:
        if self._kick is not None:
            self._kick.cancel()
            self._kick = None
        if self._parked:
            self._parked = False
            self._wake.set()

    def park(self, timeout_s: float | None = None) -> None:
        """On the thread: sleep until `wake_up` (or `timeout_s` has passed); at once if ops came."""
        self._wake.clear()
        self._parked = True
        if self.ops:  # an op landed between the check and parking: do not sleep on it
            self._parked = False
            return
        if not self._wake.wait(timeout_s):
            self._parked = False  # the time ran out: nobody woke it
