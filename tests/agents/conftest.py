from __future__ import annotations

import re
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from agentos.agents.handle import RunEvent
from agentos.agents.service import RunService
from agentos.config import KernelConfig, Settings
from agentos.store import pg_pool
from agentos.testing import standalone_driver
from tests.agents.fakes import ScriptedProvider
from tests.postgres import fresh_schema

AGENTS: dict[str, dict[str, Any]] = {
    "ops": {"tools": ["run_command", "ask_human"], "command": {"timeout_s": 10}},
}

ServiceFactory = Callable[..., Any]


@pytest.fixture(params=["sqlite", "postgres"])
async def journal_settings(request: pytest.FixtureRequest) -> AsyncIterator[Settings]:
    """Where the run journal lives: `runs.db`, or a fresh PostgreSQL schema (tests/postgres.py)."""
    if request.param == "sqlite":
        yield Settings()
        return
    async for config in fresh_schema():
        yield Settings(store=config)


@pytest.fixture
async def make_service(tmp_path: Path, journal_settings: Settings) -> AsyncIterator[ServiceFactory]:
    """RunServices on the journal of `journal_settings` (each store-level test runs on both)."""
    services: list[RunService] = []

    async def make(
        provider: Any = None,
        agents: dict[str, dict[str, Any]] | None = None,
        kernel: KernelConfig | None = None,
        **kwargs: Any,
    ) -> RunService:
        settings = msgspec.structs.replace(journal_settings, agents=AGENTS if agents is None else agents)
        if kernel is not None:
            settings = msgspec.structs.replace(settings, kernel=kernel)
        driver = standalone_driver(settings, max_active_runs=kwargs.pop("max_active_runs", None))
        service = RunService(provider or ScriptedProvider(), tmp_path / "data", settings, driver=driver, **kwargs)
        await service.start()
        services.append(service)
        return service

    yield make
    for service in services:
        await service.close(drain_s=0)


async def collect(
    service: RunService, run_id: str, *, until: str | None = None, timeout_s: float = 10.0, tenant: str = "default"
) -> list[RunEvent]:
    """Events (as `tenant` sees them) from the start until a terminal event (or the first `until` event)."""
    events: list[RunEvent] = []

    async def read() -> None:
        async for event in service.events(tenant, run_id):
            events.append(event)
            if event.type == until:
                return

    async with asyncio_timeout(timeout_s):
        await read()
    return events


def asyncio_timeout(timeout_s: float) -> Any:
    import asyncio

    return asyncio.timeout(timeout_s)


async def journal_sql(settings: Settings, data_dir: Path, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """One statement on the journal behind the service's back (closed by then), in SQLite's
    notation (`?`); on PostgreSQL the `?` become `$1`, `$2`..."""
    if settings.store.backend != "postgres":
        with sqlite3.connect(data_dir / "runs.db") as db:
            return db.execute(sql, params).fetchall()
    numbered = iter(range(1, sql.count("?") + 1))
    conn = await pg_pool.connect(settings.store)
    try:
        rows = await conn.fetch(re.sub(r"\?", lambda _: f"${next(numbered)}", sql), *params)
    finally:
        await conn.close()
    return [tuple(row) for row in rows]
