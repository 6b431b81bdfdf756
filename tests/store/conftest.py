"""One store fixture for the contract suites: memory, SQLite and PostgreSQL (tests/postgres.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentos.config import StoreConfig
from agentos.store.base import Store
from agentos.store.memory import MemoryStore
from agentos.store.sqlite import SQLiteStore
from tests.postgres import fresh_schema


@pytest.fixture
async def pg_config() -> AsyncIterator[StoreConfig]:
    async for config in fresh_schema():
        yield config


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    if request.param != "postgres":
        s: Store = MemoryStore(keep_events=True) if request.param == "memory" else SQLiteStore(tmp_path, StoreConfig())
        await s.start()
        yield s
        await s.close()
        return
    from agentos.store.postgres import PostgresStore

    async for config in fresh_schema():  # one schema for this test, dropped after it
        pg = PostgresStore(config)
        await pg.start()
        yield pg
        await pg.close()
