"""Which `ScheduleStorage` a node uses: the store's PostgreSQL database when the store is there
(every node then shares the schedules and their fires), else `schedules.db`.

`agentos.schedules.pg_storage` (and so asyncpg) is imported only for `store.backend = "postgres"`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from agentos.schedules.sqlite_storage import SqliteScheduleStorage
from agentos.schedules.storage import ScheduleStorage

if TYPE_CHECKING:
    from agentos.config import Settings

DB_FILE = "schedules.db"


def open_storage(settings: Settings, data_dir: Path | None) -> ScheduleStorage:
    """The storage (not opened yet): PostgreSQL with the store enabled and `store.backend =
    "postgres"`, else `<data_dir>/schedules.db`, in memory without a `data_dir`."""
    store = settings.store
    if store.enabled and store.backend == "postgres":
        from agentos.schedules.pg_storage import PgScheduleStorage

        return PgScheduleStorage(store)
    return SqliteScheduleStorage(None if data_dir is None else data_dir / DB_FILE)
