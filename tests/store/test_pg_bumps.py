"""Turn-epoch bump batches: a deadlock runs again (bounded), and past the bound it is the store
being unavailable for now (503 with Retry-After), never an internal error."""

from __future__ import annotations

from typing import Any

import pytest

from agentos.errors import StoreUnavailable
from agentos.store.pg_bumps import ATTEMPTS, BumpBatches

asyncpg = pytest.importorskip("asyncpg")


class DriverConnection:
    """Stands for an asyncpg connection (the driver, not ours) whose statement fails with `error`
    the first `failures` times."""

    def __init__(self, error: Exception, failures: int) -> None:
        self.error, self.failures, self.calls, self.terminated = error, failures, 0, False

    async def fetch(self, *_: Any, **__: Any) -> list[Any]:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return [("t", "s", 2, None)]

    def is_closed(self) -> bool:
        return self.terminated

    def terminate(self) -> None:
        self.terminated = True

    async def close(self) -> None:
        return None


def _batches(conn: DriverConnection) -> BumpBatches:
    async def connect() -> Any:
        return conn

    return BumpBatches(connect, acquire_timeout_s=1.0, timeout_s=1.0)


async def test_a_deadlock_runs_again_and_a_lasting_one_is_unavailability() -> None:
    once = DriverConnection(asyncpg.exceptions.DeadlockDetectedError("deadlock detected"), failures=1)
    assert await _batches(once).submit(("t", "s"), "turn_2") == (2, None) and once.calls == 2
    lasting = DriverConnection(asyncpg.exceptions.DeadlockDetectedError("deadlock detected"), failures=ATTEMPTS)
    with pytest.raises(StoreUnavailable, match="deadlocked"):  # was the driver's error: internal_error
        await _batches(lasting).submit(("t", "s"), "turn_2")
    assert lasting.calls == ATTEMPTS


async def test_another_error_is_not_tried_again() -> None:
    conn = DriverConnection(asyncpg.exceptions.UndefinedColumnError("no such column"), failures=1)
    with pytest.raises(asyncpg.exceptions.UndefinedColumnError):
        await _batches(conn).submit(("t", "s"), "turn_2")
    assert conn.calls == 1 and conn.terminated  # in an unknown state: the next batch reconnects
