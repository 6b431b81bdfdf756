from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from agentos.agents.handle import RunEvent
from agentos.agents.service import RunService
from agentos.config import Settings
from tests.agents.fakes import ScriptedProvider

AGENTS: dict[str, dict[str, Any]] = {
    "ops": {"tools": ["run_command", "ask_human"], "command": {"timeout_s": 10}},
}

ServiceFactory = Callable[..., Any]


@pytest.fixture
async def make_service(tmp_path: Path) -> AsyncIterator[ServiceFactory]:
    services: list[RunService] = []

    async def make(provider: Any = None, agents: dict[str, dict[str, Any]] | None = None, **kwargs: Any) -> RunService:
        settings = Settings(agents=AGENTS if agents is None else agents)
        service = RunService(provider or ScriptedProvider(), tmp_path / "data", settings, **kwargs)
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
