"""Which `KnowledgeStorage` a node opens: the store's PostgreSQL database with
`store.backend = "postgres"` (asyncpg is imported only then, when the storage opens), else
`<data_dir>/knowledge.db` (in memory without a data directory: the store is off)."""

from __future__ import annotations

from pathlib import Path

from agentos.config import Settings
from agentos.knowledge.sqlite_storage import SqliteKnowledgeStorage
from agentos.knowledge.storage import KnowledgeStorage


def open_storage(settings: Settings, data_dir: Path | None) -> KnowledgeStorage:
    """The storage, not yet opened (`await storage.open()`: KnowledgeService.start does)."""
    if settings.store.enabled and settings.store.backend == "postgres":
        from agentos.knowledge.pg_storage import PgKnowledgeStorage  # asyncpg only on this backend

        return PgKnowledgeStorage(settings.store)
    return SqliteKnowledgeStorage(None if data_dir is None else data_dir / "knowledge.db")
