"""The knowledge tests' server, on each backend."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from agentos.mock.server import MockServer
from agentos.testing import RunningServer


@pytest.fixture(params=["sqlite", "postgres"])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[dict[str, Any]]:
    """The store settings of each backend (PostgreSQL: a fresh schema, dropped afterwards)."""
    if request.param == "sqlite":
        yield {}
        return
    from tests.postgres import fresh_schema

    async for config in fresh_schema():
        yield {
            "store.backend": "postgres",
            "store.postgres_url": config.postgres_url,
            "store.postgres_schema": config.postgres_schema,
        }


@pytest.fixture
async def knowledge_server(
    backend: dict[str, Any], server_factory: Callable[..., Awaitable[RunningServer]], mock: MockServer
) -> RunningServer:
    # `backend` first: fixtures are torn down in reverse, so the server stops before its schema is dropped
    return await server_factory(mock.url, **backend)
