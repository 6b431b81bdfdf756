"""Waiting with a timeout, without ever swallowing a cancel: for an `asyncio.Event`
(`wait_event`), and for tasks that are cancelled once the time is up (`wait_tasks`); and a
reader's wait for the next of the items sync code hands it (`Mailbox`).

Python 3.11's `asyncio.wait_for` runs the wait as a task of its own; when a cancel reaches the
caller in the same loop step as that task completes (the event was set, or the timeout fired),
`wait_for` returns the result and the cancel is lost. A loop that waits this way between rounds
then goes on after `close()` cancelled it, and the close hangs (a server close hung 60 s in CI).
`asyncio.timeout` waits in the caller's own task and tells its own expiry from an outside cancel
by the task's cancel count, so the outside cancel always propagates.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
from collections import deque
from collections.abc import Collection
from typing import Any, Generic, TypeVar

__all__ = ["IdlePoll", "Mailbox", "cancel_and_wait", "wait_event", "wait_tasks"]

T = TypeVar("T")


async def wait_event(event: asyncio.Event, timeout_s: float | None) -> bool:
    """Wait until `event` is set or `timeout_s` has passed.

    Args:
        event: the event to wait for.
        timeout_s: the longest wait in seconds; None waits for as long as it takes.

    Returns:
        Whether the event is set when the wait ends (False: the time ran out).

    Raises:
        asyncio.CancelledError: the caller was cancelled during the wait, even in the same loop
            step as the event was set or the time ran out.
    """
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout_s):
            await event.wait()
    return event.is_set()


async def wait_tasks(tasks: Collection[asyncio.Future[Any]], timeout_s: float) -> set[asyncio.Future[Any]]:
    """Wait up to `timeout_s` for `tasks` to end, then cancel the ones still running and wait for
    them to end too (a close that must not hang on one stuck call). Nothing they raise escapes;
    a cancel of the caller does.

    Returns:
        The tasks that had to be cancelled.
    """
    if not tasks:
        return set()
    _, pending = await asyncio.wait(tasks, timeout=timeout_s)
    for task in pending:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return pending


async def cancel_and_wait(task: asyncio.Task[None] | None) -> None:
    """Cancel a background loop's `task` (None: never started) and wait until it has ended; its
    own CancelledError is the expected end, not the caller's (the caller's cancel still propagates).
    """
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


class Mailbox(Generic[T]):
    """The items sync code hands one async reader, in order: `put` never waits, `get` waits for
    the next item. After `close`, `get` answers None once no item is left. The holder bounds it
    (`len`, `clear`): a live event stream's subscriber, its queue full, drops what it holds and
    tells its reader to catch up from the source instead of growing memory."""

    __slots__ = ("_items", "_ready", "closed")

    def __init__(self) -> None:
        self._items: deque[T] = deque()
        self._ready = asyncio.Event()
        self.closed = False

    def __len__(self) -> int:
        return len(self._items)

    def put(self, item: T) -> None:
        self._items.append(item)
        self._ready.set()

    def clear(self) -> None:
        self._items.clear()

    def close(self) -> None:
        self.closed = True
        self._ready.set()

    async def get(self) -> T | None:
        """The next item, waiting for one; None once closed with none left."""
        while not self._items:
            if self.closed:
                return None
            self._ready.clear()  # before the wait: a put after the check sets it again
            await self._ready.wait()
        return self._items.popleft()


class IdlePoll:
    """How long a worker that polls a store waits between looks: `base_s` after a look found
    work, doubling with each look that found none up to `max_s` (an idle server's pollers then
    cost almost nothing), and never past a time it knows work is due (`due_at`: a postponement
    it made itself; `seen_due`: the earliest due time its last look at the store saw, such as
    another node's lease that runs out). Whatever adds work on this node wakes the worker and
    calls `reset`.

    Usage::

        poll = IdlePoll(1.0, 16.0)
        poll.found(bool(claimed))
        await wait_event(wake, poll.wait_s(now_ms))
    """

    __slots__ = ("base_s", "max_s", "current_s", "_due_ms", "_seen_ms")

    def __init__(self, base_s: float, max_s: float) -> None:
        self.base_s, self.max_s = base_s, max(base_s, max_s)
        self.current_s = base_s
        self._due_ms: list[int] = []  # a heap
        self._seen_ms: int | None = None

    def found(self, work: bool) -> None:
        self.current_s = self.base_s if work else min(2 * self.current_s, self.max_s)

    def reset(self) -> None:
        self.current_s = self.base_s

    def due_at(self, at_ms: int) -> None:
        heapq.heappush(self._due_ms, at_ms)

    def seen_due(self, at_ms: int | None) -> None:
        """The last look at the store saw work due at `at_ms` (None: none), replacing what the
        look before saw."""
        self._seen_ms = at_ms

    def wait_s(self, now_ms: int) -> float:
        """The wait from `now_ms`; 0 when a known due time has come (it is then forgotten). A due
        time `seen_due` bounds it too, though never below `base_s`: what a look saw due and did
        not take may be another node's claim in progress, which a look at once would see again."""
        due = self._due_ms
        wait_s = self.current_s
        while due and due[0] <= now_ms:
            heapq.heappop(due)
            wait_s = 0.0
        if due:
            wait_s = min(wait_s, (due[0] - now_ms) / 1000)
        if self._seen_ms is not None:
            wait_s = min(wait_s, max(self.base_s, (self._seen_ms - now_ms) / 1000))
        return wait_s
