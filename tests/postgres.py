"""A fresh PostgreSQL schema per test: the real server on 127.0.0.1:5432 (TEST_POSTGRES_URL).

Each test gets its own schema (random name, dropped afterwards), reached through the store's
`search_path`, so tests never see each other's rows and can run again and in any order.
Without a reachable server the test is skipped with the reason, unless TEST_POSTGRES_REQUIRED=1
(CI sets it: there the server is always there, and a skip would hide a failure).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentos.config import StoreConfig

URL = os.environ.get("TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
REQUIRED = os.environ.get("TEST_POSTGRES_REQUIRED") == "1"


async def fresh_schema() -> AsyncIterator[StoreConfig]:
    """The store config of a new empty schema; the schema is dropped when the test ends."""
    asyncpg = pytest.importorskip("asyncpg", reason="asyncpg not installed (pip install -e '.[postgres]')")
    try:
        admin = await asyncpg.connect(URL, timeout=5)
    except (OSError, asyncpg.PostgresError) as exc:
        if REQUIRED:
            raise
        pytest.skip(f"PostgreSQL not reachable at {URL} ({exc}); CI runs these with TEST_POSTGRES_REQUIRED=1")
    schema = f"t_{secrets.token_hex(6)}"
    try:
        yield StoreConfig(backend="postgres", postgres_url=URL, postgres_schema=schema)
    finally:
        try:
            await _drop(admin, schema)
        finally:
            await admin.close()


async def _drop(admin: Any, schema: str) -> None:
    """Drop the schema; a server the test left running may still hold its locks for a moment.

    A test whose server fixture is torn down after this one (fixtures requested in the other
    order) can deadlock the DROP with the server's last statements: PostgreSQL then aborts one
    of the two, and the drop is tried again once the other is gone.
    """
    import asyncpg

    for attempt in range(3):
        try:
            await admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            return
        except asyncpg.DeadlockDetectedError:
            if attempt == 2:
                raise
