"""Which tenants' API agents other nodes changed since this node last read them (PostgreSQL).

Theory of operation. A write of an agent NOTIFYs its tenant's id on the schema's agents channel
(`journal_pg.AGENTS_CHANNEL`, named per schema by `pg_pool.channel`) in the same statement
(`PgJournal.PUT_AGENT`), so a notification is sent if and only if the write commits. Every
node follows that channel (`agentos.store.pg_follow`) and counts each tenant's
notifications; a read of a tenant's agents records the count (and the epoch: a full refresh,
after a reconnect or every 30 s, moves it) it started at. While the follower listens and neither
has moved since that read, the agents in memory are the stored ones: a request needs no read
(`AgentRegistry.reload(only_changed=True)`). Not listening (not started, the connection lost),
nothing is taken as read: every such request reads, as without this module.

A change made on another node a moment ago may not have been heard yet: a caller that does not
find the agent it was asked for reads once more before answering 404 (`AgentRegistry.sees`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING

from agentos.journal.postgres import PgJournalStore
from agentos.store import pg_pool
from agentos.store.pg_follow import Follower, FollowerStatistics
from agentos.store.pg_health import outage_of

if TYPE_CHECKING:
    import asyncpg

Mark = tuple[int, int]  # (epoch, the tenant's count): what a read of the tenant started at


class AgentChanges:
    """Usage: `await changes.follow(store)` once; `changes.unchanged(tenant_id)` per request;
    `mark = changes.mark(tenant_id)` before reading the tenant's agents, `changes.read_at(tenant_id,
    mark)` after; `await changes.close()`."""

    def __init__(self) -> None:
        self._epoch = 0
        self._counts: dict[str, int] = {}
        self._read_at: dict[str, Mark] = {}
        self._follower: Follower[set[str] | None] | None = None

    async def follow(self, store: PgJournalStore) -> None:
        config = store.config
        self._follower = Follower(
            lambda: pg_pool.connect(config),
            store.journal.agents_channel,
            self,
            _names,
            outage=outage_of(config.postgres_url),
        )
        self._follower.start()

    async def close(self) -> None:
        if self._follower is not None:
            await self._follower.close()
            self._follower = None

    def statistics(self) -> FollowerStatistics:
        if self._follower is None:
            return FollowerStatistics(listening=False, notifications=0, full_reloads=0, reconnects=0)
        return self._follower.statistics()

    def mark(self, tenant_id: str) -> Mark:
        return self._epoch, self._counts.get(tenant_id, 0)

    def read_at(self, tenant_id: str, mark: Mark) -> None:
        self._read_at[tenant_id] = mark

    def unchanged(self, tenant_id: str) -> bool:
        """True: no other node changed the tenant's agents since this node read them."""
        return self.statistics().listening and self._read_at.get(tenant_id) == self.mark(tenant_id)

    async def refresh(self, read: Callable[[], Awaitable[set[str] | None]], *, full: bool) -> None:
        """The follower's news: these tenants' agents changed (None, or `full`: anyone's may have)."""
        tenants = await read()
        if full or tenants is None:
            self._epoch += 1  # every mark taken before is stale now; the old ones can go
            self._counts.clear()
            self._read_at.clear()
            return
        for tenant_id in tenants:
            self._counts[tenant_id] = self._counts.get(tenant_id, 0) + 1


async def _names(conn: asyncpg.Connection, tenants: Iterable[str] | None) -> set[str] | None:
    """The follower's read: the notification's names are the news, nothing is read here."""
    return None if tenants is None else set(tenants)
