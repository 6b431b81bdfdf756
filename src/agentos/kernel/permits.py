"""The provider permit pool: who may open an upstream stream, and who waits in line.

Theory of operation
-------------------
`concurrency_limit` permits are shared by session turns and by the streams of agent runs (their
model calls), of every tenant. A holder keeps its permit from the grant until it is released,
cancelled holders included: the upstream is busy until it is really closed.

Waiters stand in one line per tenant (FIFO within the tenant). When a permit frees, it goes to
the waiting tenant that holds the fewest permits for its weight (lowest held/weight). That is
weighted fair queuing on what each tenant holds: a tenant flooding the server gets what the
others leave, never their share. Ties go to the tenant served least recently, then to the oldest
waiter: with held counts all equal (a pool of one permit, say) the tenants take turns, where
arrival order would hand the pool to whoever queued the most. With one tenant it is the plain
FIFO it always was. A tenant's last-served stamp is kept while it holds or waits.

Choosing is a heap of (held/weight, last served, oldest waiter's seq, tenant), kept lazily: an
entry may be older than its tenant's state, but never above it. Keys only rise on their own (a
grant raises held and the served stamp; the line's head only gets younger), and where one falls
(a release, a new line, a weight changed by `Tenants.configure`) a fresh entry is pushed or the
heap rebuilt. So the popped entry is the true minimum when it still matches its tenant's key;
one that does not is pushed again with the true key. O(log waiting tenants) per grant (a scan of
a hundred waiting tenants cost 0.37 ms per grant under load); stale entries are bounded by a
rebuild when the heap outgrows the lines.

The reserve. A work-conserving pool lets a flooding tenant hold every permit while nobody else
asks; a newcomer then waits for a release even though it is owed most of the pool, and that
wait (a whole provider turn, at worst) lands on its time to first token. So on a shared server
(`Tenants.multi`: two tenants configured or seen) no tenant may hold more than
`concurrency_limit - reserve` permits, reserve = ceil(concurrency_limit * fair_reserve) (at
least one permit stays grantable). A newcomer is granted from the reserve at once, and its next
requests win every release until it holds its share. The cost, stated plainly: while only one
tenant is busy on a shared server, `reserve` permits stay idle (10% of the provider's concurrency
by default), so that tenant alone runs at most 90% of the pool. `fair_reserve = 0` turns the
reserve off (fair queuing still orders the waiters). A single-tenant server keeps its whole pool.

Expiry stays in global deadline order: every waiter waits the same `permit_wait_timeout_s` and
`now` never goes backwards, so the order of arrival (`_waiting`, a dict in insertion order) is
the order of deadlines and expiry looks only at the front. A waiter that no longer wants a permit
(cancelled, its run stopped) is withdrawn at once (O(1): two dict deletions), so the lines hold
live waiters only.

The pool knows ids and tenant names only; what a grant or an expiry means for a turn is
`turns.py`'s business.
"""

from __future__ import annotations

import heapq
import math

from agentos.kernel.tenants import Tally, Tenants

_Key = tuple[float, int, int, str]  # (held/weight, last served, oldest waiter's seq, tenant)


class PermitPool:
    __slots__ = (
        "_cap",
        "_heap",
        "_heap_version",
        "_held",
        "_holders",
        "_limit",
        "_lines",
        "_seq",
        "_served",
        "_tenants",
        "_timeout_s",
        "_waiting",
    )

    def __init__(self, limit: int, wait_timeout_s: float, tenants: Tenants, fair_reserve: float = 0.0) -> None:
        self._limit = limit
        self._timeout_s = wait_timeout_s
        self._tenants = tenants
        self._cap = max(1, limit - math.ceil(limit * fair_reserve))  # one tenant's most, when shared
        self._holders: dict[str, str] = {}  # holder id -> its tenant
        self._held = Tally()  # permits held per tenant
        self._waiting: dict[str, tuple[str, float, int]] = {}  # id -> (tenant, deadline, seq), in deadline order
        self._lines: dict[str, dict[str, None]] = {}  # tenant -> its waiters in order; no empty line
        self._served: dict[str, int] = {}  # tenant -> the seq of its last grant, while it holds or waits
        self._seq = 0  # counts arrivals and grants: the order of both
        self._heap: list[_Key] = []  # candidates for the next grant; see the module docstring
        self._heap_version = tenants.version

    @property
    def in_use(self) -> int:
        return len(self._holders)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def tenant_cap(self) -> int:
        """The most permits one tenant may hold now."""
        return self._cap if self._tenants.multi else self._limit

    def holds(self, holder_id: str) -> bool:
        return holder_id in self._holders

    def held_by(self, tenant: str) -> int:
        return self._held[tenant]

    def waiting_of(self, tenant: str) -> int:
        return len(self._lines.get(tenant, ()))

    def request(self, holder_id: str, tenant: str, now: float) -> bool:
        """Grant at once (True) if a permit is free and the tenant is below its cap; else join
        the tenant's line. (Nobody grantable waits while a permit is free: `release` saw to it,
        so granting here jumps no one, and the tenant's own line is empty.)"""
        self._tenants.note(tenant)
        if len(self._holders) < self._limit and self._held[tenant] < self.tenant_cap:
            self._take(holder_id, tenant)
            return True
        self._seq += 1
        self._waiting[holder_id] = (tenant, now + self._timeout_s, self._seq)
        line = self._lines.get(tenant)
        if line is None:
            self._lines[tenant] = {holder_id: None}
            self._push(tenant)
        else:
            line[holder_id] = None
        return False

    def release(self, holder_id: str) -> list[str]:
        """Give the permit back (a no-op for a non-holder); returns the waiters granted now."""
        tenant = self._holders.pop(holder_id, None)
        if tenant is None:
            return []
        self._held.add(tenant, -1)
        if tenant in self._lines:
            self._push(tenant)  # its key fell
        else:
            self._forget_if_idle(tenant)
        granted: list[str] = []
        while len(self._holders) < self._limit and (chosen := self._next_tenant()) is not None:
            waiter = next(iter(self._lines[chosen]))
            self._unqueue(waiter, chosen)
            self._take(waiter, chosen)
            granted.append(waiter)
        return granted

    def withdraw(self, holder_id: str) -> None:
        """Leave the line (a no-op for a non-waiter)."""
        entry = self._waiting.pop(holder_id, None)
        if entry is not None:
            self._unline(holder_id, entry[0])

    def next_deadline(self) -> float | None:
        for _, deadline_s, _ in self._waiting.values():
            return deadline_s
        return None

    def expire(self, now: float) -> list[str]:
        """Take the waiters whose deadline has come out of the line; returns them in order."""
        expired: list[str] = []
        for holder_id, (_, deadline_s, _) in self._waiting.items():
            if deadline_s > now:
                break
            expired.append(holder_id)
        for holder_id in expired:
            self.withdraw(holder_id)
        return expired

    # -- internals -----------------------------------------------------------------------------

    def _take(self, holder_id: str, tenant: str) -> None:
        self._holders[holder_id] = tenant
        self._held.add(tenant, 1)
        self._seq += 1
        self._served[tenant] = self._seq

    def _forget_if_idle(self, tenant: str) -> None:
        if not self._held[tenant] and tenant not in self._lines:
            self._served.pop(tenant, None)

    def _unqueue(self, holder_id: str, tenant: str) -> None:
        del self._waiting[holder_id]
        self._unline(holder_id, tenant)

    def _unline(self, holder_id: str, tenant: str) -> None:
        line = self._lines[tenant]
        del line[holder_id]
        if not line:
            del self._lines[tenant]
            self._forget_if_idle(tenant)

    def _key(self, tenant: str) -> _Key:
        line = self._lines[tenant]
        ratio = self._held[tenant] / self._tenants.share(tenant).weight
        return (ratio, self._served.get(tenant, 0), self._waiting[next(iter(line))][2], tenant)

    def _push(self, tenant: str) -> None:
        if len(self._heap) > 2 * len(self._lines) + 16:
            self._rebuild()  # includes `tenant`
        else:
            heapq.heappush(self._heap, self._key(tenant))

    def _rebuild(self) -> None:
        self._heap = [self._key(tenant) for tenant in self._lines]
        heapq.heapify(self._heap)
        self._heap_version = self._tenants.version

    def _next_tenant(self) -> str | None:
        """The waiting tenant below its cap with the lowest held/weight (ties: served least
        recently, then the oldest waiter)."""
        if len(self._lines) == 1:  # the common case: one tenant waits, no arithmetic
            tenant = next(iter(self._lines))
            return tenant if self._held[tenant] < self.tenant_cap else None
        if self._heap_version != self._tenants.version:
            self._rebuild()
        cap, heap = self.tenant_cap, self._heap
        while heap:
            entry = heap[0]
            tenant = entry[3]
            if tenant not in self._lines or self._held[tenant] >= cap:
                heapq.heappop(heap)  # gone, or at its cap: a release pushes it again
                continue
            key = self._key(tenant)
            if key == entry:
                return tenant
            heapq.heapreplace(heap, key)  # stale (its key rose): put it back where it belongs
        return None
