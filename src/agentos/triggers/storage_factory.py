"""Which `TriggerStorage` a node uses: the store's PostgreSQL database when the store is there
(every node then shares the triggers, the dedup keys and the queue), else `triggers.db`.

`agentos.triggers.pg_storage` (and so asyncpg) is imported only for `store.backend = "postgres"`:
the embedded default never loads the driver.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from agentos.triggers.sqlite_storage import SqliteTriggerStorage
from agentos.triggers.storage import TriggerStorage

if TYPE_CHECKING:
    from agentos.config import Settings

DB_FILE = "triggers.db"


def open_storage(settings: Settings, data_dir: Path | None) -> TriggerStorage:
    """The storage (not opened yet: `await storage.open()`): PostgreSQL with the store enabled and
    `store.backend = "postgres"`, else `<data_dir>/triggers.db`, in memory without a `data_dir`."""
    store = settings.store
    if store.enabled and store.backend == "postgres":
        from agentos.triggers.pg_storage import PgTriggerStorage

        return PgTriggerStorage(store)
    return SqliteTriggerStorage(None if data_dir is None else data_dir / DB_FILE)
