"""A SQLite writer thread's side of a failing disk: which durable puts are kept, until when they
wait, and which awaited operations fail at once.

Theory of operation. `ops.apply_batch` tells the thread when a batch failed twice for the
disk's sake (`ops.transient`: the file locked past busy_timeout by another connection, a full
disk, an I/O error, a file that cannot be opened now), never for a statement's (a constraint
violation fails as before: it would fail the same way forever). For a writer with `retry_puts`
(the session store's messages and events files; not the run journal, whose next owner resumes
a failed run from what the journal holds, so a late write of the old one must not land):

- the batch's durable puts (fire-and-forget, not sheddable: a turn's question, a turn's
  terminal event) go back to the head of the queue (`Batcher.requeue`) and are tried again
  after a back-off (`agentos.store.retry`: 50 ms doubling to 1 s, as on PostgreSQL), before
  anything queued after them. Nothing of a failed batch was committed (SQLite's COMMIT either
  commits or reports failure), so a retry stores nothing twice;
- the batch's awaited operations fail (`StoreUnavailable`, 503), and so do those queued behind
  it: they would meet the same disk, and behind more kept puts than one batch holds they would
  otherwise wait for the whole outage. An operation awaited during the back-off wakes the
  thread and is tried at once with the kept puts ahead of it: no added latency;
- sheddable rows fail with the batch and are counted, as when their lane is full;
- the kept puts stay counted in their lane, so a dead disk fills it to `queue_max_rows` and no
  further: then `Writer.wait_space()` raises `StoreUnavailable` instead of waiting (a turn
  fails fast rather than hanging), until a batch commits again. Durable puts that nobody
  paces with `wait_space()` (a turn's terminal event on the events file) are kept only while
  fewer than `keep_max` rows wait (the writer's two lane bounds together): past it, the
  oldest `keep_max` rows stay and the batch's other puts fail and are logged, as before this
  retry existed;
- while closing nothing is kept (nothing would try it again): the puts fail and are logged.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from agentos.store.batching import Batcher
from agentos.store.ops import Applied, Operation, store_error
from agentos.store.retry import Backoff, split

log = logging.getLogger("agentos.store")


class Outage:
    """Owned by the writer thread. `awaited` counts the batcher's operations someone awaits."""

    __slots__ = ("name", "retry_puts", "keep_max", "awaited", "backoff", "_batcher")

    def __init__(self, name: str, batcher: Batcher[Operation], retry_puts: bool, keep_max: int) -> None:
        self.name = name
        self.retry_puts = retry_puts
        self.keep_max = keep_max
        self.awaited = 0
        self.backoff = Backoff()
        self._batcher = batcher

    def wait_s(self, now: float, stopping: bool) -> float:
        """How long kept puts alone still wait; 0 when something awaited (or a close) is queued."""
        if stopping or self.awaited:
            return 0.0
        return max(0.0, self.backoff.until - now)

    def settle(
        self, batch: list[Operation], applied: Applied, stopping: bool
    ) -> tuple[list[Operation], list[Any], bool]:
        """After `batch` was applied: the operations to resolve now with their results, and
        whether the disk is failing (the batch's puts were kept)."""
        self.awaited -= sum(op.future is not None for op in batch)
        if applied.transient is None:
            self.backoff.succeeded()
            return batch, applied.results, False
        if not self.retry_puts or stopping:
            return batch, applied.results, False
        return (*self._keep_puts(batch, applied.transient), True)

    def _keep_puts(self, batch: list[Operation], cause: BaseException) -> tuple[list[Operation], list[Any]]:
        kept, failed = split(batch, _durable_put)
        behind = self._batcher.remove(lambda op: op.future is not None)
        self.awaited -= len(behind)
        room = max(0, self.keep_max - len(self._batcher))  # the rest of the queue waits too
        kept, dropped = kept[:room], kept[room:]
        now = time.monotonic()
        self._batcher.requeue(kept, now)
        delay_s = self.backoff.failed(now) if kept else 0.0
        log.error(
            "%s writer: the disk failed a batch of %d (%s); %d durable writes kept, tried again in %.2fs;"
            " %d dropped (%d rows wait already); %d awaited operations queued behind it fail",
            self.name,
            len(batch),
            cause,
            len(kept),
            delay_s,
            len(dropped),
            len(self._batcher) - len(kept),
            len(behind),
        )
        failed = [*failed, *dropped, *behind]
        return failed, [store_error(self.name, cause) for _ in failed]


def _durable_put(op: Operation) -> bool:
    """A durable write nobody awaits: what a batch the disk failed keeps for a retry."""
    return op.future is None and not op.sheddable
