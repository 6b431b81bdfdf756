"""The line of this node's streams waiting for a slot of the cluster's provider limit.

`agentos.coordination.permits` puts a stream here when the cluster is full. Waiters stand in the
order they came (their kernel permits' grant order, so the kernel's fair order is kept on the
node). A pass tries the line from its head, one acquire each, until Redis says "full"; a waiter
whose tenant is at its cap is skipped for that pass. One pass runs at a time: a kick during a
pass runs another after it. What kicks (a release, a "released" message, the heartbeat's retry)
is the permits' business.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from agentos.coordination.semaphore import CAPPED, GRANTED
from agentos.errors import ProviderLimitTimeout

# One acquire for (stream id, tenant, shared): GRANTED, FULL or CAPPED.
Try = Callable[[str, str, bool], Awaitable[int]]
MAX_PASSES = 1000  # in a row, each after a kick during the one before


class PermitLine:
    """Waiters for a cluster slot, granted in order by passes over the line."""

    def __init__(
        self, try_: Try, release: Callable[[str], None], spawn: Callable[[Coroutine[Any, Any, None]], None]
    ) -> None:
        self._try = try_
        self._release = release  # gives back a slot granted to a waiter that has gone
        self._spawn = spawn  # runs a pass in a task the permits wait for on close
        self._waiters: dict[str, tuple[str, bool, asyncio.Future[None]]] = {}  # stream -> (tenant, shared, grant)
        self._pumping = False
        self._again = False

    def __len__(self) -> int:
        return len(self._waiters)

    async def wait(self, stream_id: str, tenant: str, shared: bool, timeout_s: float) -> None:
        """Stand in line until a pass grants `stream_id` a slot, at most `timeout_s`.

        Raises:
            ProviderLimitTimeout: no slot within `timeout_s`.
        """
        grant: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters[stream_id] = (tenant, shared, grant)
        self.kick()  # a slot may have freed since the caller's own try
        try:
            async with asyncio.timeout(max(0.0, timeout_s)):
                await asyncio.shield(grant)  # shielded: a pass resolves it, the timeout must not
        except TimeoutError:
            if not (grant.done() and not grant.cancelled()):
                raise ProviderLimitTimeout("no provider permit in time") from None
        except BaseException:
            if grant.done() and not grant.cancelled():  # granted as the wait was cancelled
                self._release(stream_id)
            raise
        finally:
            self._waiters.pop(stream_id, None)
            if not grant.done():
                grant.cancel()  # a pass that is granting it right now gives the slot back

    def kick(self) -> None:
        """Run a pass over the line now (or again after the running one)."""
        if not self._waiters:
            return
        if self._pumping:
            self._again = True
            return
        self._pumping = True  # now, not when the task starts: one pass at a time
        self._spawn(self._pump())

    async def _pump(self) -> None:
        try:
            for _ in range(MAX_PASSES):  # bounded; each pass needs a new kick to be repeated
                self._again = False
                await self._pass()
                if not self._again:
                    return
        finally:
            self._pumping = False

    async def _pass(self) -> None:
        """Try the line from its head until the cluster is full; skip capped tenants."""
        capped: set[str] = set()
        for stream_id, (tenant, shared, grant) in list(self._waiters.items()):
            if grant.done() or tenant in capped or stream_id not in self._waiters:
                continue
            status = await self._try(stream_id, tenant, shared)
            if status == GRANTED:
                if grant.cancelled():  # the waiter gave up during the call
                    self._release(stream_id)
                else:
                    grant.set_result(None)
            elif status == CAPPED:
                capped.add(tenant)
            else:
                return
