"""Time as an input: the kernel never reads a clock, the runtime passes `now` in."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds on a monotonic scale."""
        ...


class MonotonicClock:
    __slots__ = ()

    def now(self) -> float:
        return time.monotonic()


def wall_ms() -> int:
    """Wall-clock milliseconds since the epoch, for timestamps stored in rows."""
    return time.time_ns() // 1_000_000


class WallClock:
    """Seconds since the epoch (UTC): what a calendar quota (tokens per UTC day) counts in."""

    __slots__ = ()

    def now(self) -> float:
        return time.time()
