"""Start work in small waves: at most `per_iteration` waiters go per event-loop iteration.

A burst of start calls makes a burst of runs, and a run's first step (replay, then opening a
provider stream) is the costliest moment of its life: about a millisecond of loop time. Run
back to back, a hundred of them hold the loop for a hundred milliseconds, and every start call
still being read waits behind them. Released a few per iteration, the loop polls its sockets
between waves, so accepting new work stays fast while accepted work starts a little later; the
total work is the same.
"""

from __future__ import annotations

import asyncio
from collections import deque

DEFAULT_PER_ITERATION = 8


class Pacer:
    def __init__(self, per_iteration: int = DEFAULT_PER_ITERATION) -> None:
        assert per_iteration >= 1
        self._per_iteration = per_iteration
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._scheduled = False

    def __len__(self) -> int:
        return len(self._waiters)

    async def wait(self) -> None:
        """Return in a later loop iteration, after at most the waiters queued before this one."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._waiters.append(future)
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._release)
        await future

    def _release(self) -> None:
        released = 0
        while self._waiters and released < self._per_iteration:
            future = self._waiters.popleft()
            if not future.done():  # a cancelled waiter takes no place in the wave
                future.set_result(None)
                released += 1
        if self._waiters:
            asyncio.get_running_loop().call_soon(self._release)  # after the loop polls its sockets
        else:
            self._scheduled = False
