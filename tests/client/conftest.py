"""A real server (loopback, real SQLite) with an agent, its provider the bench mock in its `tools` scenario."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from agentos.config import settings_from_dict
from agentos.mock.server import MockServer
from agentos.testing import RunningServer, start_server

# Two run_command calls (each to approve), then ask_human: the mock's `tools` scenario.
CAREFUL = {"tools": ["run_command", "ask_human"], "approval_required": ["run_command"]}


@pytest.fixture
async def tools_server(
    tmp_path: Path, mock_factory: Callable[..., Awaitable[MockServer]]
) -> AsyncIterator[RunningServer]:
    mock = await mock_factory(scenario="tools")
    settings = settings_from_dict(
        {"data_dir": str(tmp_path / "data"), "provider": {"url": mock.url, "retry_budget_s": 2.0}}
    )
    server = await start_server(settings)
    yield server
    await server.close()
