"""The schedule storages under one contract: `schedules.db` (a real file) and PostgreSQL (a
fresh schema per test, tests/postgres.py); fake runs and a fake clock for the scheduler."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from agentos.errors import AdmissionRejected, NotFound
from agentos.schedules.records import Overlap, ScheduleRow
from agentos.schedules.slots import Misfire
from agentos.schedules.sqlite_storage import SqliteScheduleStorage
from agentos.schedules.storage import ScheduleStorage
from tests.postgres import fresh_schema


@pytest.fixture(params=["sqlite", "postgres"])
async def storage(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ScheduleStorage]:
    if request.param == "sqlite":
        s: ScheduleStorage = SqliteScheduleStorage(tmp_path / "schedules.db")
        await s.open()
        yield s
        await s.close()
        return
    async for config in fresh_schema():
        from agentos.schedules.pg_storage import PgScheduleStorage

        s = PgScheduleStorage(config)
        await s.open()
        yield s
        await s.close()


def schedule(
    *,
    every_s: int = 10,
    created_ms: int = 0,
    max_runs_in_flight: int = 1,
    overlap: Overlap = "skip",
    misfire: Misfire = "skip",
    agent: str = "ops",
    tenant: str = "t1",
) -> ScheduleRow:
    return ScheduleRow(
        schedule_id="sch_" + secrets.token_hex(10),
        tenant_id=tenant,
        agent=agent,
        input="the report",
        cron=None,
        zone="UTC",
        every_s=every_s,
        max_runs_in_flight=max_runs_in_flight,
        overlap=overlap,
        misfire=misfire,
        paused=False,
        created_ms=created_ms,
        cursor_ms=created_ms + every_s * 1000,
    )


class FakeRuns:
    """The runs a scheduler starts, in memory (`agents.poller.PolledRuns`): a start of an id that exists
    starts nothing, as `RunService.start_run`'s does; `refuse` makes starts fail as a tenant
    at its `max_active_runs` does."""

    def __init__(self, agents: tuple[str, ...] = ("ops",)) -> None:
        self.agents = agents
        self.status: dict[str, str] = {}
        self.starts: list[str] = []  # every run id started, in order (a repeat would show twice)
        self.refuse = False
        self.refused: list[str] = []  # the run ids of the starts refused, in order

    async def start_run(
        self, tenant_id: str, agent: str, text: str, *, run_id: str | None = None, owner: str | None = None
    ) -> str:
        assert run_id is not None
        if self.refuse:
            self.refused.append(run_id)
            raise AdmissionRejected(1, what="runs", code="tenant_active_runs")
        if agent not in self.agents:
            raise NotFound(f"agent {agent!r} not found", code="agent_not_found")
        if run_id not in self.status:
            self.status[run_id] = "running"
            self.starts.append(run_id)
        return run_id

    async def get_run(self, tenant_id: str, run_id: str) -> dict[str, Any]:
        if run_id not in self.status:
            raise NotFound(f"run {run_id!r} not found")
        return {"run_id": run_id, "status": self.status[run_id]}

    def when_runs_free(self, listener: Callable[[str, int], None]) -> Callable[[], None]:
        return lambda: None  # the scheduler's rounds are driven by the tests

    def finish_all(self) -> None:
        for run_id in self.status:
            self.status[run_id] = "completed"
