"""Giving memory back after the reaper's evictions, and the process's heap figures.

Freed memory mostly stays in the process. CPython's small-object allocator (objects up to 512
bytes) gives a 1 MiB arena back only once its last object is gone; larger objects come from the
C allocator, and glibc's malloc gives back only the top of its main heap by itself: the free
pages below the top and in its other arenas (one per thread that allocated) stay resident until
`malloc_trim(0)` hands them to the kernel (`madvise(MADV_DONTNEED)`). The reaper evicts idle
sessions one `Tick` at a time (`EvictSession`): `Reclaimer.evicted()` counts them and, once
`memory.trim_after_evictions` sessions left since the last trim, runs one trim in a worker thread
(the allocator takes its own locks, never the event loop's time), at most once per
`memory.trim_interval_s`. A trim that is not yet allowed is put off until it is. Where there is
no glibc (macOS, musl), trimming is a no-op and one log line says so.

`heap_figures()` answers `GET /v1/admin/memory`, only when asked: `sys.getallocatedblocks()`,
glibc's `mallinfo2()`, the RSS and, when the interpreter was started with `PYTHONTRACEMALLOC=1`
(the memory bench's `--tracemalloc` only: it costs memory per live block and time per
allocation), tracemalloc's count of the bytes Python holds, from the first import on.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import platform
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentos.clock import Clock

log = logging.getLogger("agentos.memory")

_MALLINFO2_FIELDS = (  # struct mallinfo2, glibc >= 2.33: ten size_t
    *("arena", "ordblks", "smblks", "hblks", "hblkhd"),
    *("usmblks", "fsmblks", "uordblks", "fordblks", "keepcost"),
)


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in _MALLINFO2_FIELDS]


class Allocator:
    """glibc's malloc through ctypes: `trim()` and `info()`; both None-safe elsewhere."""

    def __init__(self, *, use_libc: bool = True) -> None:
        """`use_libc=False`: as on a platform without glibc (trim is a no-op, no figures)."""
        self._libc: Any = None
        if use_libc and sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc":
            try:
                self._libc = ctypes.CDLL("libc.so.6")
                self._libc.malloc_trim.argtypes, self._libc.malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
                self._libc.mallinfo2.restype = _Mallinfo2  # glibc >= 2.33
            except (OSError, AttributeError):
                self._libc = None

    @property
    def available(self) -> bool:
        return self._libc is not None

    def trim(self) -> bool:
        """`malloc_trim(0)`: True when memory went back to the kernel; False where it cannot."""
        return bool(self._libc.malloc_trim(0)) if self._libc is not None else False

    def info(self) -> dict[str, int] | None:
        """The C heap: bytes in use, free but held, mmapped, and releasable at the top."""
        if self._libc is None:
            return None
        m = self._libc.mallinfo2()
        return {
            "arena_bytes": int(m.arena),
            "in_use_bytes": int(m.uordblks),
            "free_bytes": int(m.fordblks),
            "mmap_bytes": int(m.hblkhd),
            "top_releasable_bytes": int(m.keepcost),
        }


def rss_bytes() -> int:
    """This process's resident set, from `/proc/self/statm` (0 where there is none)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


@dataclass(slots=True)
class TrimStatistics:
    trims: int = 0  # malloc_trim calls made
    released_bytes: int = 0  # RSS before - after each trim, summed (each at least 0)
    last_released_bytes: int = 0
    last_ms: float = 0.0  # how long the last one took, in its thread
    evicted_since: int = 0  # sessions evicted since the last trim


def trim_due(pending: int, after_evictions: int, last_at: float, interval_s: float, now: float) -> float | None:
    """When the next trim may run: None (not enough evictions, or trimming off), else the
    seconds from `now` (0: at once)."""
    if after_evictions == 0 or pending < after_evictions:
        return None
    return max(0.0, last_at + interval_s - now)


class Reclaimer:
    """Counts evictions and trims the C heap after `after_evictions` of them, rate-limited."""

    def __init__(
        self,
        clock: Clock,
        *,
        after_evictions: int,
        interval_s: float,
        allocator: Allocator | None = None,
        on_trim: Callable[[int], None] | None = None,  # released bytes, after each trim
    ) -> None:
        self._clock = clock
        self.after_evictions = after_evictions
        self.interval_s = interval_s
        self.allocator = allocator or Allocator()
        self._on_trim = on_trim
        self.statistics = TrimStatistics()
        self._last_at = float("-inf")
        self._planned: asyncio.TimerHandle | asyncio.Task[None] | None = None
        self._said_unavailable = False
        self.trimmed = asyncio.Event()  # set after each trim (tests wait on it)

    def evicted(self, count: int = 1) -> None:
        """`count` sessions left memory (on the loop, from the reaper's commands)."""
        self.statistics.evicted_since += count
        if self._planned is not None:
            return
        pending, now = self.statistics.evicted_since, self._clock.now()
        delay = trim_due(pending, self.after_evictions, self._last_at, self.interval_s, now)
        if delay is None:
            return
        if not self.allocator.available:
            self._unavailable()
            return
        self._planned = asyncio.get_running_loop().call_later(delay, self._start)  # 0: after this tick's evictions

    def _unavailable(self) -> None:
        self.statistics.evicted_since = 0
        if not self._said_unavailable:
            self._said_unavailable = True
            log.info("memory: no glibc malloc_trim on this platform; evicted sessions' memory is reused, not returned")

    def _start(self) -> None:
        self._planned = asyncio.get_running_loop().create_task(self._trim())

    async def _trim(self) -> None:
        self.statistics.evicted_since = 0
        self._last_at = self._clock.now()
        try:
            released, took_s = await asyncio.get_running_loop().run_in_executor(None, self._trim_now)
        finally:
            self._planned = None
        s = self.statistics
        s.trims, s.released_bytes = s.trims + 1, s.released_bytes + released
        s.last_released_bytes, s.last_ms = released, took_s * 1000
        if self._on_trim is not None:
            self._on_trim(released)
        self.trimmed.set()
        self.trimmed.clear()

    def _trim_now(self) -> tuple[int, float]:
        """In a worker thread: trim, and what it gave back (RSS before - after)."""
        before, started = rss_bytes(), time.monotonic()
        self.allocator.trim()
        took, after = time.monotonic() - started, rss_bytes()
        return max(0, before - after), took

    @property
    def trim_planned(self) -> bool:
        """A trim is due and waits for its turn (the interval since the last one)."""
        return self._planned is not None

    def close(self) -> None:
        if isinstance(self._planned, asyncio.TimerHandle):
            self._planned.cancel()
        self._planned = None

    def figures(self) -> dict[str, Any]:
        s = self.statistics
        return {
            "after_evictions": self.after_evictions,
            "interval_s": self.interval_s,
            "available": self.allocator.available,
            "trims": s.trims,
            "released_bytes": s.released_bytes,
            "last_released_bytes": s.last_released_bytes,
            "last_ms": round(s.last_ms, 3),
            "evicted_since_last": s.evicted_since,
        }


def heap_figures(allocator: Allocator) -> dict[str, Any]:
    """The process's memory as the allocators see it (computed when asked, never on a turn)."""
    traced: dict[str, int] | None = None
    if tracemalloc.is_tracing():
        current, peak = tracemalloc.get_traced_memory()
        traced = {"current_bytes": current, "peak_bytes": peak, "overhead_bytes": tracemalloc.get_tracemalloc_memory()}
    return {
        "rss_bytes": rss_bytes(),
        "allocated_blocks": sys.getallocatedblocks(),
        "malloc": allocator.info(),
        "tracemalloc": traced,
    }
