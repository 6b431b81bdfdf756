"""`open_storage` picks the backend from the settings; SQLite lands in `<data_dir>/knowledge.db`."""

from __future__ import annotations

from pathlib import Path

import msgspec

from agentos.config import StoreConfig, load_settings
from agentos.knowledge.pg_storage import PgKnowledgeStorage
from agentos.knowledge.sqlite_storage import SqliteKnowledgeStorage
from agentos.knowledge.storage import open_storage
from tests.knowledge.test_storage import collection


async def test_sqlite_in_the_data_dir(tmp_path: Path) -> None:
    settings = load_settings(None, environ={}, overrides={"data_dir": str(tmp_path)})
    storage = open_storage(settings, tmp_path)
    assert isinstance(storage, SqliteKnowledgeStorage)
    await storage.open()
    await storage.create_collection(collection(), max_per_tenant=5)
    await storage.close()
    assert (tmp_path / "knowledge.db").is_file()
    memory = open_storage(settings, None)
    assert isinstance(memory, SqliteKnowledgeStorage) and memory.path is None


async def test_postgres_when_the_store_is(pg: StoreConfig) -> None:
    settings = msgspec.structs.replace(load_settings(None, environ={}, overrides={}), store=pg)
    storage = open_storage(settings, None)
    assert isinstance(storage, PgKnowledgeStorage)
    await storage.open()
    try:
        created = await storage.create_collection(collection(), max_per_tenant=5)
        assert await storage.get_collection("acme", "docs") == created
    finally:
        await storage.close()
    off = msgspec.structs.replace(settings, store=msgspec.structs.replace(pg, enabled=False))
    assert isinstance(open_storage(off, None), SqliteKnowledgeStorage)
