"""On PostgreSQL a session's running turn is the one holding its epoch that has not ended
(`Store.running_turn`): what `on_busy` reject asks across nodes, and what retention leaves
alone. Every way a turn ends must end it there too, including the ends that store no answer
(its client gone before its question was stored, a rollback turn cancelled), or the session
would look busy to every node until its next turn."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentos.config import StoreConfig, load_settings
from agentos.kernel import Kernel
from agentos.metrics import Metrics
from agentos.runtime.driver import Driver
from agentos.runtime.runtime import Runtime, kernel_limits
from agentos.runtime.turn import CollectingSink
from agentos.store.postgres import PostgresStore
from agentos.testing import FakeClock, ScriptedProvider
from tests.postgres import fresh_schema

pytest.importorskip("asyncpg")


class GoneAtOnce(CollectingSink):
    """A client that left before the turn's first event reached it."""

    async def send(self, event_id: str, name: str, data: dict[str, Any]) -> None:
        raise ConnectionError("the client left")


@pytest.fixture
async def runtime() -> AsyncIterator[Runtime]:
    async for config in fresh_schema():
        store = PostgresStore(config)
        await store.start()
        settings = load_settings(None, environ={}, overrides=_store_overrides(config))
        driver = Driver(Kernel(kernel_limits(settings)), FakeClock())
        yield Runtime(settings, store, ScriptedProvider(["an ", "answer"]), Metrics(), driver=driver)
        await store.close()


def _store_overrides(config: StoreConfig) -> dict[str, object]:
    return {
        "store.backend": "postgres",
        "store.postgres_url": config.postgres_url,
        "store.postgres_schema": config.postgres_schema,
    }


async def test_a_turn_whose_client_left_before_its_question_was_stored_is_not_running(runtime: Runtime) -> None:
    sid = (await runtime.create_session("default", "default", {})).session_id
    await runtime.run_turn(await runtime.start_turn("default", sid, "hello?"), GoneAtOnce())
    assert await runtime.store.running_turn("default", sid) is None
    assert await runtime.store.cancel_turn("default", sid) is None  # nothing to fence out, no second end recorded
    second = await runtime.start_turn("default", sid, "hello")
    await runtime.run_turn(second, CollectingSink())
    events = await runtime.store.list_events("default", sid, after=0, limit=10)
    # One end for the first turn (its start never reached the client: not stored); the second
    # turn's bump found nothing running, so it recorded no "superseded" end for it.
    assert sorted((e.turn_id == second.turn_id, e.type) for e in events) == [
        (False, "turn.cancelled"),
        (True, "turn.completed"),
        (True, "turn.started"),
    ]


async def test_a_turn_that_stored_its_answer_is_not_running(runtime: Runtime) -> None:
    sid = (await runtime.create_session("default", "default", {})).session_id
    await runtime.run_turn(await runtime.start_turn("default", sid, "hello"), CollectingSink())
    assert await runtime.store.running_turn("default", sid) is None
