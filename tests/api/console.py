"""A server for the console's tests: the `tools` mock, the agent `careful` (its commands need an
approval), `server.api_token` set, and keys made through the real admin API."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentos.config import settings_from_dict
from agentos.mock.server import MockServer
from agentos.testing import RunningServer, start_server
from agentos.testing.tenants import TenantKey, create_tenant_key

TOKEN = "console-admin-token"
AGENTS = {"careful": {"tools": ["run_command", "ask_human"], "approval_required": ["run_command"]}}


@dataclass(frozen=True)
class ConsoleServer:
    server: RunningServer
    admin: TenantKey  # an admin key of tenant "ops"
    alice: TenantKey  # tenant keys, no admin scope
    bob: TenantKey

    @property
    def url(self) -> str:
        return self.server.url


async def start_console_server(
    data_dir: Path,
    mock_factory: Callable[..., Awaitable[MockServer]],
    *,
    server: dict[str, Any] | None = None,
    telemetry: dict[str, Any] | None = None,
) -> ConsoleServer:
    """The caller closes `.server`. `server`: more of the `[server]` table; `telemetry`: the
    `[telemetry]` table (none: tracing off)."""
    # 50 tokens/s: a turn's 12 tokens come 20 ms apart, so a browser sees them arrive one by one
    mock = await mock_factory(scenario="tools", ttft_ms=20, tps=50, tokens=12)
    settings = settings_from_dict(
        {
            "data_dir": str(data_dir),
            "provider": {"url": mock.url, "retry_budget_s": 2.0},
            "server": {"api_token": TOKEN, **(server or {})},
            "agents": AGENTS,
            **({"telemetry": telemetry} if telemetry else {}),
        }
    )
    running = await start_server(settings)
    admin = await create_tenant_key(running.url, TOKEN, tenant_id="ops", scopes=["admin"])
    alice = await create_tenant_key(running.url, TOKEN, tenant_id="alice")
    bob = await create_tenant_key(running.url, TOKEN, tenant_id="bob")
    return ConsoleServer(running, admin, alice, bob)
