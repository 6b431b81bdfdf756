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


class ReferenceWall:
    """Wall-clock milliseconds taken from a reference clock and carried forward by this host's
    monotonic clock, so a step of this host's wall clock (NTP, `date -s`) does not move them.

    Why: a run's human deadline is journaled as wall time, and the node that resumes the run
    (after a restart or a takeover) compares it with its own now: on a node whose clock stepped
    an hour ahead, a wait asked an hour before would expire at once. The nodes of a cluster share
    PostgreSQL, so its clock is the reference (`rebase` after each lease round,
    `agentos.agents.leases`). Until the first rebase the reference is this host's wall clock
    when the object was made."""

    __slots__ = ("_at_ns", "_ref_ms")

    def __init__(self) -> None:
        self._ref_ms = time.time_ns() / 1e6
        self._at_ns = time.monotonic_ns()

    def now_ms(self) -> int:
        return int(self._ref_ms + (time.monotonic_ns() - self._at_ns) / 1e6)

    def rebase(self, ref_ms: float, sent_ns: int, received_ns: int) -> None:
        """The reference read `ref_ms` between `sent_ns` and `received_ns` (this host's
        monotonic clock): taken as read at the middle of the round trip."""
        self._ref_ms = ref_ms
        self._at_ns = (sent_ns + received_ns) // 2
