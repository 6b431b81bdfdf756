"""The two lanes of a writer, counted: what both writers (SQLite's thread, PostgreSQL's task)
keep the same way.

Durable rows are never dropped: `queued` counts them and callers wait for room (`wait_space`)
before adding one. Sheddable rows (events, access log) are dropped when their lane is full
(`admit_sheddable`). Only the event loop touches a `Lanes`: it counts an operation in when it
is queued and out (`settle`) when its batch has been applied.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from agentos.store.base import WriterStatistics


class Lanes:
    __slots__ = (
        "batches",
        "dropped",
        "failed",
        "name",
        "on_batch",
        "queued",
        "shed_max",
        "shed_queued",
        "space",
        "max",
        "written",
    )

    def __init__(self, name: str, queue_max: int, shed_max: int, on_batch: Callable[[int, float], None] | None) -> None:
        self.name = name
        self.max = queue_max
        self.shed_max = shed_max
        self.on_batch = on_batch
        self.queued = self.shed_queued = 0
        self.written = self.dropped = self.batches = self.failed = 0
        self.space = asyncio.Event()

    def admit_sheddable(self, refusing: bool) -> bool:
        """Room for one more sheddable row? If not (or the writer refuses), it is counted dropped."""
        if self.shed_queued >= self.shed_max or refusing:
            self.dropped += 1
            return False
        return True

    def count_in(self, sheddable: bool) -> None:
        if sheddable:
            self.shed_queued += 1
        else:
            self.queued += 1

    async def wait_space(self, stop: Callable[[], bool]) -> None:
        """Until the durable lane is under its bound, or `stop()` (the writer will never drain)."""
        while self.queued >= self.max and not stop():
            self.space.clear()
            await self.space.wait()

    def settle(self, size: int, shed: int, failed: int, wait_ms: float) -> None:
        """A batch of `size` operations (`shed` of them sheddable, `failed` failed) is done."""
        self.queued -= size - shed
        self.shed_queued -= shed
        self.written += size
        self.batches += 1
        self.failed += failed
        if self.queued < self.max:
            self.space.set()
        if self.on_batch is not None:
            self.on_batch(size, wait_ms)

    def statistics(self, retried: int = 0) -> WriterStatistics:
        return WriterStatistics(
            self.name, self.queued, self.written, self.dropped, self.batches, self.shed_queued, self.failed, retried
        )
