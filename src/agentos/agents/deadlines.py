"""One timer task for every run waiting on a human, however many there are.

Deadlines are wall-clock milliseconds (they are journaled and must survive a restart). The
task sleeps until the earliest one, or until a new earlier deadline is added. Expired entries
are handed to `on_expired`; an entry that no longer matters (the human answered, the run was
cancelled) is simply ignored by the callback, so nothing needs removing.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

OnExpired = Callable[[str, str], Awaitable[None]]  # (run_id, operation_id)


@dataclass(frozen=True, slots=True)
class DeadlineStatistics:
    pending: int
    fired: int


class Deadlines:
    def __init__(self, on_expired: OnExpired, now_ms: Callable[[], int]) -> None:
        self._on_expired = on_expired
        self._now_ms = now_ms
        self._heap: list[tuple[int, str, str]] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._fired = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._serve(), name="agentos-human-deadlines")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def add(self, deadline_ms: int, run_id: str, operation_id: str) -> None:
        heapq.heappush(self._heap, (deadline_ms, run_id, operation_id))
        if self._heap[0][0] == deadline_ms:
            self._wake.set()

    def statistics(self) -> DeadlineStatistics:
        return DeadlineStatistics(pending=len(self._heap), fired=self._fired)

    async def _serve(self) -> None:
        while True:
            self._wake.clear()
            for run_id, operation_id in self._pop_due():
                self._fired += 1
                try:
                    await self._on_expired(run_id, operation_id)
                except Exception:  # one bad run must not stop the timers of all others
                    log.exception("human deadline of run %r failed", run_id)
            delay_s = (self._heap[0][0] - self._now_ms()) / 1000 if self._heap else None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=delay_s)

    def _pop_due(self) -> list[tuple[str, str]]:
        now = self._now_ms()
        due: list[tuple[str, str]] = []
        while self._heap and self._heap[0][0] <= now:
            _, run_id, operation_id = heapq.heappop(self._heap)
            due.append((run_id, operation_id))
        return due
