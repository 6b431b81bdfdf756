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
        await admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await admin.close()
