"""`ScheduleService`: schedules of a tenant, and the scheduler that fires them (docs/schedules.md).

Tenancy: every call names the tenant, and another tenant's schedule answers exactly like a
missing one (404 `schedule_not_found`).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry

from agentos.agents.service import RunService
from agentos.clock import wall_ms
from agentos.errors import InvalidInput, NotFound
from agentos.runtime.turn import check_input
from agentos.schedules.records import Overlap, ScheduleRow
from agentos.schedules.scheduler import ScheduleMetrics, Scheduler
from agentos.schedules.slots import Every, Misfire, Timing, check_cron, check_zone, first_slot, load_zone
from agentos.schedules.storage import ScheduleStorage
from agentos.schedules.storage_factory import open_storage

if TYPE_CHECKING:
    from agentos.config import Settings

LAST_FIRES = 10  # fires a read of one schedule shows


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleSpec:
    """What a client asks for (`POST /v1/schedules`), before it is checked."""

    agent: str
    input: str
    cron: str | None = None
    time_zone: str = "UTC"
    every_s: int | None = None
    max_runs_in_flight: int = 1
    overlap: Overlap = "skip"
    misfire: Misfire = "skip"
    paused: bool = False


def schedule_not_found(schedule_id: str) -> NotFound:
    return NotFound(f"schedule {schedule_id!r} not found", code="schedule_not_found")


class ScheduleService:
    """Usage::

    service = ScheduleService(settings, open_schedule_storage(settings, data_dir), runs)
    await service.start()          # opens the storage; the scheduler fires what is due
    created = await service.create("acme", ScheduleSpec(agent="ops", input="report", cron="0 9 * * 1-5"))
    await service.close()
    """

    def __init__(
        self,
        settings: Settings,
        storage: ScheduleStorage,
        runs: RunService,
        *,
        now_ms: Callable[[], int] = wall_ms,
        tenant_enabled: Callable[[str], bool] = lambda _: True,
    ) -> None:
        self.config = settings.schedules
        self._max_input_chars = settings.kernel.max_input_chars
        self.storage = storage
        self._runs = runs
        self._now_ms = now_ms
        self._tenant_enabled = tenant_enabled
        self.metrics = ScheduleMetrics()
        self.scheduler = Scheduler.on_this_node(
            settings, storage, runs, self.config, now_ms, self.metrics, tenant_enabled=tenant_enabled
        )

    async def start(self) -> None:
        await self.storage.open()
        self.scheduler.start()

    async def close(self) -> None:
        await self.scheduler.close()
        await self.storage.close()

    def register_metrics(self, registry: CollectorRegistry) -> None:
        registry.register(self.metrics.fires)

    async def create(self, tenant_id: str, spec: ScheduleSpec, *, owner: str | None = None) -> dict[str, Any]:
        """`owner`: the end user making it (its runs are that user's).

        Raises: InvalidInput (422: `invalid_cron`, `unknown_time_zone`, `invalid_every`,
        `invalid_schedule`, `unknown_agent`, `invalid_input`), Conflict (`too_many_schedules`)."""
        now = self._now_ms()
        await load_zone(spec.time_zone)
        timing = self._timing(spec, now)
        check_input(spec.input, self._max_input_chars)
        await self._check_agent(tenant_id, spec.agent)
        row = ScheduleRow(
            schedule_id=f"sch_{secrets.token_hex(10)}",
            tenant_id=tenant_id,
            agent=spec.agent,
            input=spec.input,
            cron=spec.cron if spec.every_s is None else None,
            zone=spec.time_zone,
            every_s=spec.every_s,
            max_runs_in_flight=spec.max_runs_in_flight,
            overlap=spec.overlap,
            misfire=spec.misfire,
            paused=spec.paused,
            created_ms=now,
            cursor_ms=first_slot(timing, now),
            owner=owner,
        )
        await self.storage.create(row, max_per_tenant=self.config.max_schedules)
        self.scheduler.wake()
        return {**row.to_dict(), "last_fires": []}

    def _timing(self, spec: ScheduleSpec, now: int) -> Timing:
        if (spec.cron is None) == (spec.every_s is None):
            raise InvalidInput("a schedule has either `cron` or `every_s`", code="invalid_schedule")
        if spec.cron is not None:
            return check_cron(spec.cron, spec.time_zone)
        assert spec.every_s is not None
        low, high = self.config.min_every_s, self.config.max_every_s
        if not low <= spec.every_s <= high:
            raise InvalidInput(f"every_s must be from {low} to {high}", code="invalid_every")
        check_zone(spec.time_zone)  # shown in the answer: a known zone, even where no cron reads it
        return Every(spec.every_s, now)

    async def _check_agent(self, tenant_id: str, agent: str) -> None:
        await self._runs.sync_agents(tenant_id)
        try:
            self._runs.get_agent(tenant_id, agent)
        except NotFound:
            raise InvalidInput(f"agent {agent!r} is not an agent this tenant can run", code="unknown_agent") from None

    async def list_schedules(self, tenant_id: str, *, owner: str | None = None) -> list[dict[str, Any]]:
        """The tenant's schedules (`owner`: only that end user's)."""
        schedules = await self.storage.list_schedules(tenant_id)
        return [s.to_dict() for s in schedules if owner is None or s.owner == owner]

    async def owner_of(self, tenant_id: str, schedule_id: str) -> str | None:
        """The end user who made the tenant's schedule (None: a tenant key). Raises: NotFound."""
        return (await self._schedule(tenant_id, schedule_id)).owner

    async def get(self, tenant_id: str, schedule_id: str) -> dict[str, Any]:
        """The schedule, its next fire and its last fires (newest first). Raises: NotFound."""
        schedule = await self._schedule(tenant_id, schedule_id)
        fires = await self.storage.fires(tenant_id, schedule_id, LAST_FIRES)
        return {**schedule.to_dict(), "last_fires": [f.to_dict() for f in fires]}

    async def set_paused(self, tenant_id: str, schedule_id: str, paused: bool) -> dict[str, Any]:
        """Pause, or resume from the next slot after now (the slots of the pause are not fired).
        Raises: NotFound."""
        schedule = await self._schedule(tenant_id, schedule_id)
        cursor = schedule.cursor_ms
        if not paused and schedule.paused:
            await load_zone(schedule.zone)
            cursor = first_slot(schedule.timing, self._now_ms())
        updated = await self.storage.set_paused(tenant_id, schedule_id, paused, cursor)
        if updated is None:
            raise schedule_not_found(schedule_id)
        self.scheduler.wake()
        return updated.to_dict()

    async def delete(self, tenant_id: str, schedule_id: str) -> None:
        """Its fires go with it; runs it started are ordinary runs. Raises: NotFound."""
        if not await self.storage.delete(tenant_id, schedule_id):
            raise schedule_not_found(schedule_id)

    async def _schedule(self, tenant_id: str, schedule_id: str) -> ScheduleRow:
        schedule = await self.storage.get(tenant_id, schedule_id)
        if schedule is None or not self._tenant_enabled(tenant_id):
            raise schedule_not_found(schedule_id)
        return schedule


def open_schedule_storage(settings: Settings, data_dir: Path | None) -> ScheduleStorage:
    """`schedules.db` in `data_dir` (in memory without one), or PostgreSQL with `store.backend = "postgres"`."""
    return open_storage(settings, data_dir)
