"""Durable writes kept when their batch failed for want of the database: the back-off and the
split that the SQLite and PostgreSQL writers share.

A writer whose batch failed for a reason no row is at fault for (PostgreSQL unreachable; a
SQLite file locked past `busy_timeout_ms`, a full disk, an I/O error) keeps the batch's durable
fire-and-forget writes (`split`), puts them back at the head of its queue (`Batcher.requeue`)
and tries them again `Backoff.delay_s` later: 50 ms, doubling up to 1 s while batches keep
failing, 50 ms again once one commits. The kept writes stay counted in their lane, so the
lane's bound (`wait_space()`) still limits what waits in memory.

    backoff = Backoff()
    backoff.failed(now=10.0)     # 0.05: the kept writes wait until backoff.until == 10.05
    backoff.failed(now=10.05)    # 0.1
    backoff.succeeded()          # the next failure waits 0.05 again
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

RETRY_FIRST_S = 0.05  # after a batch failed for want of the database: the first back-off
RETRY_MAX_S = 1.0  # ...doubling up to this while it keeps failing


class Backoff:
    """When kept writes are tried again, on the writer's own clock."""

    __slots__ = ("delay_s", "until")

    def __init__(self) -> None:
        self.delay_s = RETRY_FIRST_S  # the next failure's wait
        self.until = -math.inf  # kept writes wait until then

    def failed(self, now: float) -> float:
        """A batch failed at `now`: its kept writes wait `delay_s`, the next failure twice that."""
        delay = self.delay_s
        self.until = now + delay
        self.delay_s = min(delay * 2, RETRY_MAX_S)
        return delay

    def succeeded(self) -> None:
        self.delay_s = RETRY_FIRST_S
        self.until = -math.inf


def split(batch: list[T], keep: Callable[[T], bool]) -> tuple[list[T], list[T]]:
    """The items `keep` holds for and the others, each in the batch's order."""
    kept: list[T] = []
    rest: list[T] = []
    for item in batch:
        (kept if keep(item) else rest).append(item)
    return kept, rest
