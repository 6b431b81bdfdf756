"""The loop the scheduler and the trigger dispatcher share (`agents.poller.RunPoller`): a round at
start, the next one when woken (however long its wait), a failed round logged and survived, a
"go on" (None) running the next round without waiting, and a close that ends the task."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import pytest

from agentos.agents.poller import LOCAL_OWNER, RunPoller, lease_owner
from agentos.config import Settings, StoreConfig
from agentos.errors import StoreUnavailable

log = logging.getLogger("tests.poller")


class _Runs:
    async def start_run(
        self, tenant_id: str, agent: str, text: str, *, run_id: str | None = None, owner: str | None = None
    ) -> str:
        raise AssertionError("this poller starts no run")

    async def get_run(self, tenant_id: str, run_id: str) -> dict[str, Any]:
        raise AssertionError("this poller reads no run")

    def when_runs_free(self, listener: Callable[[str, int], None]) -> Callable[[], None]:
        return lambda: None


class _Poller(RunPoller[None, None, None]):
    """Its rounds answer from `script` (a number: found; an exception: raised), one each."""

    task_name = "test-poller"
    logger = log

    def __init__(self, script: list[int | Exception]) -> None:
        super().__init__(None, _Runs(), None, "owner", lambda: 0, None)
        self.script = script
        self.rounds = asyncio.Queue[int]()  # the number of each round run, as it ends

    async def round(self) -> int:
        step = self.script.pop(0) if self.script else 0
        self.rounds.put_nowait(self.rounds.qsize())
        if isinstance(step, Exception):
            raise step
        return step

    def wait_s(self, found: int) -> float | None:
        return None if found > 1 else 3600.0  # more than one: more are due


async def _next_round(poller: _Poller) -> None:
    async with asyncio.timeout(5):
        await poller.rounds.get()


async def test_a_wake_runs_a_round_at_once_and_close_ends_the_loop() -> None:
    poller = _Poller([])
    poller.start()
    await _next_round(poller)  # the first round, at start
    poller.wake()
    await _next_round(poller)  # not an hour later
    task = poller._task
    await poller.close()
    assert task is not None and task.done()
    assert poller.rounds.empty()


async def test_a_failed_round_is_logged_and_the_next_one_runs(caplog: pytest.LogCaptureFixture) -> None:
    poller = _Poller([StoreUnavailable("postgres: gone"), RuntimeError("a bug")])
    caplog.set_level(logging.DEBUG, logger="tests.poller")
    poller.start()
    try:
        await _next_round(poller)
        poller.wake()
        await _next_round(poller)
        poller.wake()
        await _next_round(poller)  # the loop survived both
    finally:
        await poller.close()
    outage, bug = (r for r in caplog.records if r.name == "tests.poller")
    assert outage.levelno == logging.DEBUG and outage.exc_info is None  # an outage is nobody's bug
    assert bug.levelno == logging.ERROR and bug.exc_info is not None


async def test_a_round_that_finds_more_is_followed_by_one_without_a_wait() -> None:
    poller = _Poller([5, 5, 0])
    poller.start()
    try:
        for _ in range(3):  # no wake: only the "go on" (None) gets past the first two rounds
            await _next_round(poller)
    finally:
        await poller.close()


def test_the_lease_owner_is_local_and_reclaims_on_sqlite_and_is_the_node_on_postgres() -> None:
    assert lease_owner(Settings()) == (LOCAL_OWNER, True)
    pg = StoreConfig(enabled=True, backend="postgres", postgres_url="postgresql://127.0.0.1/test")
    owner, reclaim = lease_owner(Settings(store=pg))
    assert owner != LOCAL_OWNER and not reclaim
