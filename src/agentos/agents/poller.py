"""`RunPoller`: the background task that turns stored work into runs, shared by the scheduler
(`schedules.scheduler`: due slots) and the trigger dispatcher (`triggers.dispatcher`: accepted
deliveries).

Both hold leases in their store under one owner (this node on PostgreSQL, `local` on SQLite),
start each run under an id chosen when the work was stored (a start of an id that exists starts
nothing), and loop the same way: a round, then a wait that ends early on `wake()`. What a round
does and how long the wait is are theirs (`round`, `wait_s`), and what a run's place freed on
this node means to them (`room_freed`, heard from `start` to `close`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, Self, TypeVar

from agentos.errors import StoreUnavailable
from agentos.waiting import cancel_and_wait, wait_event

if TYPE_CHECKING:
    from agentos.config import Settings

LOCAL_OWNER = "local"  # the lease owner on SQLite (one node: a restart takes its leases back)

StorageT = TypeVar("StorageT")
ConfigT = TypeVar("ConfigT")
MetricsT = TypeVar("MetricsT")


class PolledRuns(Protocol):
    """What a poller needs of the runs (`agentos.agents.service.RunService`)."""

    async def start_run(
        self, tenant_id: str, agent: str, text: str, *, run_id: str | None = None, owner: str | None = None
    ) -> str: ...

    async def get_run(self, tenant_id: str, run_id: str) -> dict[str, Any]: ...

    def when_runs_free(self, listener: Callable[[str, int], None]) -> Callable[[], None]: ...


def lease_owner(settings: Settings) -> tuple[str, bool]:
    """The owner of this node's leases, and whether it reclaims the ones it finds at start: on
    SQLite the one owner is this process's, so leases found there are its previous process's."""
    if settings.store.enabled and settings.store.backend == "postgres":
        from agentos.coordination.node import node_id  # only nodes sharing PostgreSQL need a unique one

        return node_id(), False
    return LOCAL_OWNER, True


class RunPoller(Generic[StorageT, ConfigT, MetricsT]):
    """Subclasses name their task and logger, and define `round` and `wait_s`."""

    task_name: ClassVar[str]
    logger: ClassVar[logging.Logger]

    def __init__(
        self,
        storage: StorageT,
        runs: PolledRuns,
        config: ConfigT,
        owner: str,
        now_ms: Callable[[], int],
        metrics: MetricsT,
        *,
        tenant_enabled: Callable[[str], bool] = lambda _: True,
        reclaim: bool = False,
    ) -> None:
        """`reclaim`: this owner is the only one (SQLite): leases it finds at start are its own
        previous process's, so its first round takes them back at once instead of waiting for
        them to expire."""
        self._storage = storage
        self._runs = runs
        self._config = config
        self._owner = owner
        self._now_ms = now_ms
        self._metrics = metrics
        self._tenant_enabled = tenant_enabled
        self._reclaim = reclaim
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._unlisten: Callable[[], None] = lambda: None

    @classmethod
    def on_this_node(
        cls,
        settings: Settings,
        storage: StorageT,
        runs: PolledRuns,
        config: ConfigT,
        now_ms: Callable[[], int],
        metrics: MetricsT,
        *,
        tenant_enabled: Callable[[str], bool],
    ) -> Self:
        """The poller of this node's service: its leases under this node's owner (`lease_owner`)."""
        owner, reclaim = lease_owner(settings)
        return cls(storage, runs, config, owner, now_ms, metrics, tenant_enabled=tenant_enabled, reclaim=reclaim)

    def start(self) -> None:
        """The loop, as a task; from now until `close`, each run place freed on this node is told to `room_freed`."""
        self._unlisten = self._runs.when_runs_free(self.room_freed)
        self._task = asyncio.create_task(self._loop(), name=self.task_name)

    def room_freed(self, tenant_id: str, runs: int) -> None:
        """`runs` of the tenant's runs stopped counting on this node (`RunService.when_runs_free`):
        a subclass whose work waits for a place wakes; here, nothing."""

    def wake(self) -> None:
        self._wake.set()

    @property
    def woken(self) -> bool:
        """A wake is pending: the loop's next wait ends at once."""
        return self._wake.is_set()

    async def close(self) -> None:
        # The flag as well as the cancel: a store driver may turn the cancel of a round into
        # another error, which the loop logs and survives (`wait_event` itself never swallows it).
        self._stopping = True
        self._unlisten()
        self._wake.set()
        await cancel_and_wait(self._task)
        self._task = None

    async def round(self) -> int:
        """One round; how much work it found (what `wait_s` is given)."""
        raise NotImplementedError

    def wait_s(self, found: int) -> float | None:
        """How long to wait (for `wake`) after a round that found `found`; None: go on at once."""
        raise NotImplementedError

    async def _work(self) -> int:
        """What the loop runs each time: the round (a subclass adds its housekeeping)."""
        return await self.round()

    async def _loop(self) -> None:
        while not self._stopping:
            self._wake.clear()  # before the round: work stored during it wakes the next one
            found = 0
            try:
                found = await self._work()
            except StoreUnavailable as exc:  # the outage has its two lines (pg_health.Outage): no traceback
                self.logger.debug("%s round failed: %s", self.task_name, exc)
            except Exception:  # a bug: logged, tried again next round
                self.logger.exception("%s round failed", self.task_name)
            wait_s = self.wait_s(found)
            if wait_s is not None:
                await wait_event(self._wake, wait_s)
