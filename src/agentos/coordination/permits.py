"""One provider limit for the cluster: `kernel.concurrency_limit` counts the streams of all nodes.

A stream opens upstream only with two things: the node's kernel permit (the kernel's pool, which
orders this node's waiters fairly across tenants) and then a slot of the cluster semaphore in
Redis (`coordination.semaphore`), taken here. The slot is held from the grant until the stream's
`ProviderReleased`/`TurnEnded`, under a lease (`coordination.permit_lease_s`) that one heartbeat
task per node renews for all its holders every lease/3, in one script call.

Waiting. When the cluster is full, this node's waiters stand in one line in the order their
kernel permits were granted (so the kernel's fair order is kept on the node). The line is tried
from its head, one acquire each, until Redis says "full"; a waiter whose tenant is at its cap is
skipped for that pass (the line: `coordination.permit_line`). A pass runs when a slot may have
freed: a release on this node, a "released" message over the bus from any node, or, as a bound
on a lost message, every `RETRY_S`. Nobody polls tightly, and a wait ends at its deadline
(`kernel.permit_wait_timeout_s` from the turn's submission) with the same
`ProviderLimitTimeout` as a kernel permit that never came.

Redis down (`Link.call` answers None). The node grants from its share of the limit,
`ceil(limit / coordination.expected_nodes)`, counting every stream it has open, those granted by
Redis before the outage included: the node never exceeds its share while it decides alone, and
the cluster's total stays about the limit when the load balancer spreads evenly. The slots held
in Redis when it went away expire there after the lease (others cannot reach Redis either, so
nobody is granted them wrongly meanwhile); when Redis answers again, the heartbeat adds every
stream the node still has open back (`refresh`), so the count in Redis is the truth again before
new grants depend on it. Each outage is logged once by the link.

Redis restarted (or flushed). Its connections break, so the bus reconnects at once, and each
node adds its open streams back right then (`refresh` on the bus's reconnect), not only at its
next heartbeat. Until every node has, grants wait: the first node to find the semaphore gone
sets a hold-off in Redis for a little longer than a heartbeat period (`coordination.semaphore`),
so the count in Redis never starts from 0 while streams are open.

Gauges (`statistics()`, read by `agentos.metrics`): this node's streams holding a slot, its
streams waiting for one, and how many of its slots it had to add back because Redis had lost them.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from agentos.config import Settings
from agentos.coordination.batches import Batches
from agentos.coordination.bus import Bus
from agentos.coordination.link import Link
from agentos.coordination.node import node_id
from agentos.coordination.permit_line import PermitLine
from agentos.coordination.semaphore import FULL, GRANTED, RELEASED_CHANNEL, RedisSemaphore
from agentos.waiting import wait_tasks

log = logging.getLogger("agentos.coordination")

RETRY_S = 0.5  # a waiting node tries again at least this often, in case a "released" was lost
MAX_UNRELEASED = 1000  # releases kept for a Redis that comes back (one call each on recovery)
COUNT_AGAIN_TRIES = 5  # after a bus reconnect, tried over about 5 link retries, then left to the heartbeat
HOLD_MARGIN_S = 0.1  # added to the longest time between two heartbeats of a node: the hold-off
CLOSE_WAIT_S = 5.0  # closing waits this long for the heartbeat and the calls in flight


@dataclass(frozen=True)
class PermitStatistics:
    held: int  # this node's streams holding a slot of the cluster's limit
    waiting: int  # its streams waiting for one (they hold their kernel permit)
    restored_total: int  # its slots it added back because Redis had lost them (a restart, a long outage)


class ClusterPermits:
    """The cluster's provider slots as this node sees them. `start()` before use, `close()` after."""

    def __init__(
        self, link: Link, bus: Bus | None, node: str, *, limit: int, cap: int, lease_s: float, retry_s: float = RETRY_S
    ) -> None:
        self._link = link
        self._bus = bus
        self._node = node
        self.hold_s = hold_off_s(lease_s, retry_s)  # the tenants' caps (`holds`) wait as long
        self._semaphore = RedisSemaphore(link.redis, link.prefix, limit, cap, lease_s, self.hold_s)
        self.share = math.ceil(limit / link.expected_nodes)  # what the node grants alone, Redis down
        self._lease_s = lease_s
        self._retry_s = retry_s
        self.held: dict[str, str] = {}  # stream id -> tenant: this node's open streams
        self._line = PermitLine(self._try, self.release, self._spawn)
        self._tasks: set[asyncio.Task[None]] = set()
        self._heartbeat: asyncio.Task[None] | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self._unreleased: set[str] = set()  # slots given back while Redis was down
        self._restored = 0
        self._closing = False
        self._renewals: list[Callable[[bool], Awaitable[None]]] = []  # other leases this heartbeat keeps
        # The acquires and releases of streams starting and ending together: one Lua call each way.
        self._acquires: Batches[tuple[str, str, bool], int] = Batches(self._acquire_batch)
        self._releases: Batches[str, int] = Batches(self._release_batch)

    @property
    def waiting(self) -> int:
        return len(self._line)

    def statistics(self) -> PermitStatistics:
        return PermitStatistics(len(self.held), len(self._line), self._restored)

    async def start(self) -> None:
        if self._bus is not None:
            self._unsubscribe = await self._bus.subscribe(RELEASED_CHANNEL, lambda _: self._line.kick())
            # A broken subscriber connection is how a node hears of a Redis restart first: its
            # streams go back into Redis now, not at the next heartbeat.
            self._bus.on_reconnect(lambda: self._spawn(self._count_again()))
        self._link.when_back(lambda: self._refresh(recovery=True))
        self._heartbeat = asyncio.get_running_loop().create_task(self._beat())

    def renew_also(self, renew: Callable[[bool], Awaitable[None]]) -> None:
        """Call `renew(recovery)` on every heartbeat too (`agentos.coordination.holds`)."""
        self._renewals.append(renew)

    async def close(self) -> None:
        """Stop the heartbeat and give back what is still held (best effort: the lease covers the rest)."""
        self._closing = True  # a flag too: a cancel that meets a client's timeout may be lost
        if self._unsubscribe is not None:
            self._unsubscribe()
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            await wait_tasks({self._heartbeat}, CLOSE_WAIT_S)  # each call is bounded by the link
        for stream_id in list(self.held):
            self.release(stream_id)
        await wait_tasks(set(self._tasks), CLOSE_WAIT_S)  # closing never hangs on a Redis call
        await self._releases.wait_idle()

    async def acquire(self, stream_id: str, tenant: str, timeout_s: float, *, shared: bool = False) -> None:
        """Take a cluster slot for `stream_id`, waiting at most `timeout_s`.

        Raises:
            ProviderLimitTimeout: no slot within `timeout_s`.
        """
        if not self._line and await self._try(stream_id, tenant, shared) == GRANTED:
            return  # the common case: one round trip
        await self._line.wait(stream_id, tenant, shared, timeout_s)

    def release(self, stream_id: str) -> None:
        """Give the stream's slot back (a no-op for a stream without one). Redis is told in the
        background: this runs on every stream's end, where nothing should wait."""
        tenant = self.held.pop(stream_id, None)
        if tenant is None:
            return
        member = self._member(stream_id)
        self._spawn(self._released(member))

    # -- internals ---------------------------------------------------------------------------

    async def _released(self, member: str, recovery: bool = False) -> None:
        if recovery:  # Redis just came back: this call goes first, alone
            told = await self._link.call(lambda: self._semaphore.release(member), recovery=True) is not None
        else:
            told = await self._releases.submit(member) is not None
        if not told:
            if len(self._unreleased) < MAX_UNRELEASED:  # beyond it, the lease alone ends them
                self._unreleased.add(member)  # told again when Redis answers
        else:
            self._unreleased.discard(member)
        self._line.kick()  # our own waiters need no message from Redis

    async def _release_batch(self, members: list[str]) -> list[int] | None:
        freed = await self._link.call(lambda: self._semaphore.release_many(members))
        return None if freed is None else [1] * len(members)

    async def _try(self, stream_id: str, tenant: str, shared: bool) -> int:
        """One acquire: GRANTED (recorded in `held`), FULL or CAPPED. Redis down: the node's
        share decides."""
        status = await self._acquires.submit((stream_id, tenant, shared))
        if status is None:  # Redis down: every stream the node has open counts against its share
            status = GRANTED if len(self.held) < self.share else FULL
            if status == GRANTED:
                self.held[stream_id] = tenant
        return int(status)

    async def _acquire_batch(self, items: list[tuple[str, str, bool]]) -> list[int] | None:
        members = [(self._member(stream_id), tenant, shared) for stream_id, tenant, shared in items]
        answer = await self._link.call(lambda: self._semaphore.acquire_many(members))
        if answer is None:
            return None
        self._semaphore.known = True
        for (stream_id, tenant, _), status in zip(items, answer, strict=True):
            if status == GRANTED:  # here, not in the caller: a caller cancelled meanwhile still releases it
                self.held[stream_id] = tenant
        return answer

    async def _beat(self) -> None:
        """The heartbeat, and the bounded retry of a waiting line."""
        every = self._lease_s / 3
        next_beat = time.monotonic()
        while not self._closing:
            if time.monotonic() >= next_beat:
                next_beat = time.monotonic() + every
                try:
                    await self._refresh()
                except Exception:  # Redis errors are the link's; anything else is a bug, not a stop
                    log.exception("coordination: the provider slots' heartbeat failed")
            await asyncio.sleep(min(self._retry_s, every))
            self._line.kick()

    async def _count_again(self) -> None:
        """After the bus reconnected: put this node's streams back into Redis now. The link's
        pooled connections broke with the bus's, so the first call may fail; the link answers
        again after its retry interval, its recovery (`_refresh(recovery=True)`) first."""
        for _ in range(COUNT_AGAIN_TRIES):
            if self._closing:
                return
            await self._refresh()
            if not self._link.down:
                return
            await asyncio.sleep(self._link.retry_s)

    async def _refresh(self, recovery: bool = False) -> None:
        """Renew this node's leases (`recovery`: Redis just came back, before any other call)."""
        for member in list(self._unreleased) if recovery else ():
            await self._released(member, recovery=True)
        # Even with nothing held: it keeps the semaphore's `alive` marker (see `coordination.semaphore`).
        members = [(self._member(stream_id), tenant) for stream_id, tenant in self.held.items()]
        added = await self._link.call(lambda: self._semaphore.refresh(members), recovery=recovery)
        if added is not None:
            self._semaphore.known = True
        if added:
            self._restored += added
            log.warning("coordination: %d provider slots of this node were missing in Redis; counted again", added)
        for renew in self._renewals:
            await renew(recovery)

    def _member(self, stream_id: str) -> str:
        return f"{self._node}/{stream_id}"

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def hold_off_s(lease_s: float, retry_s: float = RETRY_S) -> float:
    """How long grants wait after Redis lost its data: the longest time between two heartbeats
    of a node (the period, plus the sleep that may overrun it), and a margin."""
    return lease_s / 3 + min(retry_s, lease_s / 3) + HOLD_MARGIN_S


def cluster_permits(settings: Settings, link: Link, bus: Bus | None) -> ClusterPermits:
    """The cluster's slots for `kernel.concurrency_limit`, with one tenant's cap as on one node
    (`concurrency_limit - ceil(concurrency_limit * fair_reserve)`, at least one)."""
    limit, reserve = settings.kernel.concurrency_limit, settings.kernel.fair_reserve
    cap = max(1, limit - math.ceil(limit * reserve))
    lease_s = settings.coordination.permit_lease_s
    return ClusterPermits(link, bus, node_id(), limit=limit, cap=cap, lease_s=lease_s)
