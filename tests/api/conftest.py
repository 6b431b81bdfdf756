"""Fixtures shared by the API tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agentos.mock.server import MockServer
from agentos.testing import RunningServer, start_server
from tests.conftest import make_settings
from tests.knowledge.http import create_collection
from tests.postgres import fresh_schema


@pytest.fixture(params=["sqlite", "postgres"])
async def any_store(
    request: pytest.FixtureRequest, tmp_path: Path, mock: MockServer, http: aiohttp.ClientSession
) -> AsyncIterator[RunningServer]:
    """A server with a collection `docs` on each store backend: NUL broke only PostgreSQL."""
    overrides: dict[str, Any] = {}
    async for config in fresh_schema() if request.param == "postgres" else _once():
        if config is not None:
            overrides = {"store.backend": "postgres", "store.postgres_url": config.postgres_url}
            overrides["store.postgres_schema"] = config.postgres_schema
        server = await start_server(make_settings(tmp_path / "data", mock.url, **overrides))
        try:
            await create_collection(http, server.url)
            yield server
        finally:
            await server.close()


async def _once() -> AsyncIterator[None]:
    yield None
