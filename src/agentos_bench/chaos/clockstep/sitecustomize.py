"""Test-only: a wall-clock step for one node of the chaos campaign, outside the server's code.

The campaign starts a node with this directory first on `PYTHONPATH` and
`AGENTOS_BENCH_CLOCK_STEP_FILE=<path>`; Python imports this module at start-up (`site`), before
the server. It replaces `time.time` and `time.time_ns` with the real clock plus an offset, the
number of seconds in that file (read again every 50 ms by a daemon thread; a missing or empty
file is 0): writing `3600` steps the node's wall clock an hour ahead at once, as an NTP step or
an operator's `date -s` would, and `0` steps it back. The monotonic clock is left alone, as a
real step leaves `CLOCK_MONOTONIC`. Without the variable this module does nothing; the server
itself has no hook for it.
"""

from __future__ import annotations

import os
import threading
import time

_offset_s = 0.0


def _install(path: str) -> None:
    real_time, real_time_ns = time.time, time.time_ns

    def stepped_time() -> float:
        return real_time() + _offset_s

    def stepped_time_ns() -> int:
        return real_time_ns() + int(_offset_s * 1e9)

    time.time, time.time_ns = stepped_time, stepped_time_ns
    threading.Thread(target=_watch, args=(path,), name="clock-step", daemon=True).start()


def _watch(path: str) -> None:
    global _offset_s
    while True:  # a daemon thread: it ends with the process
        try:
            with open(path) as file:
                _offset_s = float(file.read().strip() or 0)
        except (OSError, ValueError):
            _offset_s = 0.0
        time.sleep(0.05)  # noqa: TID251 -- its own thread: reads the step file 20 times a second


if _path := os.environ.get("AGENTOS_BENCH_CLOCK_STEP_FILE"):
    _install(_path)
