"""Which storage a node opens: `triggers.db` in the data directory, in memory with the store off,
PostgreSQL with `store.backend = "postgres"` (sharing the store's schema and migrations)."""

from __future__ import annotations

from pathlib import Path

from agentos.config import Settings, StoreConfig
from agentos.store import pg_migrations, pg_pool
from agentos.triggers.sqlite_storage import SqliteTriggerStorage
from agentos.triggers.storage_factory import open_storage
from tests.triggers.conftest import trigger


async def test_the_embedded_store_is_triggers_db_in_the_data_directory(tmp_path: Path) -> None:
    storage = open_storage(Settings(), tmp_path)
    assert isinstance(storage, SqliteTriggerStorage)
    await storage.open()
    try:
        t = trigger()
        await storage.create_trigger(t, max_per_tenant=1)
    finally:
        await storage.close()
    assert (tmp_path / "triggers.db").is_file()

    reopened = open_storage(Settings(), tmp_path)
    await reopened.open()
    try:
        assert await reopened.find_trigger(t.trigger_id) == t
    finally:
        await reopened.close()


async def test_without_a_data_directory_the_triggers_live_in_memory() -> None:
    storage = open_storage(Settings(), None)
    await storage.open()
    try:
        t = trigger()
        await storage.create_trigger(t, max_per_tenant=1)
        assert await storage.find_trigger(t.trigger_id) == t
    finally:
        await storage.close()


async def test_the_postgres_store_holds_the_triggers_after_migration_0007(pg: StoreConfig, tmp_path: Path) -> None:
    storage = open_storage(Settings(store=pg), tmp_path)
    assert not isinstance(storage, SqliteTriggerStorage)
    await storage.open()
    try:
        t = trigger()
        await storage.create_trigger(t, max_per_tenant=1)
        assert await storage.find_trigger(t.trigger_id) == t
    finally:
        await storage.close()
    assert not (tmp_path / "triggers.db").exists()
    conn = await pg_pool.connect(pg)
    try:
        states = await pg_migrations.status(conn)
    finally:
        await conn.close()
    assert all(s.applied_at is not None for s in states) and 7 in [s.version for s in states]
