"""Turn epochs on PostgreSQL: a write of a superseded turn is refused by the database itself.

Two `PostgresStore`s on one schema stand for two nodes: neither hears of the other's turns
except through the database, which is the point (the fencing holds with no message at all).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from agentos.errors import SessionNotFound, StaleTurn
from agentos.store.base import EpochBump
from agentos.store.postgres import PostgresStore
from agentos.store.records import EventRecord, MessageRecord, MessageRole, SessionRecord
from tests.postgres import fresh_schema

pytest.importorskip("asyncpg")

T, S = "tenant-a", "ses_1"


@pytest.fixture
async def nodes() -> AsyncIterator[tuple[PostgresStore, PostgresStore]]:
    async for config in fresh_schema():
        a, b = PostgresStore(config), PostgresStore(config)
        await a.start()
        await b.start()
        await a.create_session(SessionRecord(session_id=S, tenant_id=T))
        yield a, b
        await b.close()
        await a.close()


def answer(turn_id: str, content: str = "answer", role: MessageRole = "assistant") -> MessageRecord:
    return MessageRecord(tenant_id=T, session_id=S, turn_id=turn_id, role=role, content=content)


def event(turn_id: str, kind: str) -> EventRecord:
    return EventRecord(tenant_id=T, session_id=S, turn_id=turn_id, type=kind, data={})


async def test_a_write_with_a_stale_epoch_is_refused_after_a_newer_turn_started(
    nodes: tuple[PostgresStore, PostgresStore],
) -> None:
    a, b = nodes
    assert await a.begin_turn(T, S, "turn_1") == EpochBump(1, None)
    await a.commit_message(answer("turn_1", "question 1", role="user"))  # before its successor: kept
    a.add_event(event("turn_1", "turn.started"))
    assert len(await a.list_events(T, S, after=0, limit=10)) == 1  # committed (a read waits for its lane)
    assert await b.begin_turn(T, S, "turn_2") == EpochBump(2, "turn_1")  # another node: a never hears of it
    with pytest.raises(StaleTurn):
        await a.commit_message(answer("turn_1", "late answer"))
    a.add_event(event("turn_1", "turn.completed"))  # fire and forget: refused and counted
    await b.commit_message(answer("turn_2", "answer 2"))
    messages = await b.history(T, S, limit=10)
    assert [(m.turn_id, m.content) for m in messages] == [("turn_1", "question 1"), ("turn_2", "answer 2")]
    # turn 1 never wrote its end: the bump that fenced it out did, and its own late one was refused
    assert [e.type for e in await a.list_events(T, S, after=0, limit=10)] == ["turn.started", "turn.cancelled"]
    assert a.statistics().stale_writes_total == 2
    assert b.statistics().stale_writes_total == 0


async def test_a_stale_row_fails_alone_and_its_batch_neighbours_commit(
    nodes: tuple[PostgresStore, PostgresStore],
) -> None:
    a, b = nodes
    await a.create_session(SessionRecord(session_id="ses_2", tenant_id=T))
    await a.begin_turn(T, S, "turn_1")
    await a.begin_turn(T, "ses_2", "other")
    await b.begin_turn(T, S, "turn_2")
    stale, fine = (
        answer("turn_1"),
        MessageRecord(tenant_id=T, session_id="ses_2", turn_id="other", role="user", content="y"),
    )
    results = await asyncio.gather(a.commit_message(stale), a.commit_message(fine), return_exceptions=True)
    assert isinstance(results[0], StaleTurn) and results[1] is None
    assert [m.content for m in await a.history(T, "ses_2", limit=5)] == ["y"]


async def test_a_turn_of_a_session_deleted_elsewhere_cannot_start_or_write(
    nodes: tuple[PostgresStore, PostgresStore],
) -> None:
    a, b = nodes
    await a.begin_turn(T, S, "turn_1")
    assert await b.delete_session(T, S)
    with pytest.raises(StaleTurn):
        await a.commit_message(answer("turn_1"))
    with pytest.raises(SessionNotFound):
        await a.begin_turn(T, S, "turn_2")
    with pytest.raises(SessionNotFound):
        await a.begin_turn("tenant-b", "ses_other", "turn_3")


async def test_epochs_of_one_session_bumped_from_two_nodes_at_once_are_all_distinct(
    nodes: tuple[PostgresStore, PostgresStore],
) -> None:
    a, b = nodes
    starts = [(a if i % 2 else b).begin_turn(T, S, f"turn_{i}") for i in range(20)]
    assert sorted(b.epoch for b in await asyncio.gather(*starts) if b) == list(range(1, 21))


async def test_a_cancel_fences_out_the_running_turn_and_names_it(nodes: tuple[PostgresStore, PostgresStore]) -> None:
    a, b = nodes
    assert await b.cancel_turn(T, S) is None  # nothing ever ran
    await a.begin_turn(T, S, "turn_1")
    bumped = await b.cancel_turn(T, S)
    assert bumped is not None and (bumped.epoch, bumped.previous_turn) == (2, "turn_1")
    with pytest.raises(StaleTurn):
        await a.commit_message(answer("turn_1"))
    assert await b.cancel_turn(T, S) is None  # nothing runs any more
    await a.begin_turn(T, S, "turn_2")
    await a.commit_message(answer("turn_2"))
    assert await b.cancel_turn(T, S) is None  # turn_2 has stored its answer: it is over


async def test_the_bump_records_the_end_of_the_turn_it_fences_out(nodes: tuple[PostgresStore, PostgresStore]) -> None:
    """A fenced-out turn cannot write its own terminal event: its successor's bump writes it,
    in the same transaction. A turn that stored its answer had ended: nothing is added."""
    a, b = nodes
    await a.begin_turn(T, S, "turn_1")
    await a.commit_message(answer("turn_1"))  # turn 1 ended (its answer is stored)
    assert await b.begin_turn(T, S, "turn_2") == EpochBump(2, None)  # supersedes nothing: no node is told
    assert await b.begin_turn(T, S, "turn_3") == EpochBump(3, "turn_2")  # supersedes turn 2, still running
    await b.begin_turn(T, S, "turn_4")
    assert await a.cancel_turn(T, S) is not None  # turn 4, from another node
    events = await a.list_events(T, S, after=0, limit=10)
    assert [(e.turn_id, e.type, e.data) for e in events] == [
        ("turn_2", "turn.cancelled", {"turn_id": "turn_2", "reason": "superseded"}),
        ("turn_3", "turn.cancelled", {"turn_id": "turn_3", "reason": "superseded"}),
        ("turn_4", "turn.cancelled", {"turn_id": "turn_4", "reason": "cancelled"}),
    ]


async def test_the_next_turn_on_the_same_node_lets_a_cancelled_turns_last_writes_land(
    nodes: tuple[PostgresStore, PostgresStore],
) -> None:
    a, _ = nodes
    for i in range(20):  # each time, the partial answer is queued, not committed, when the bump starts
        await a.begin_turn(T, S, f"turn_{i}")
        a.add_message(answer(f"turn_{i}", "partial"))
        a.add_event(event(f"turn_{i}", "turn.cancelled"))
        a.end_turn(f"turn_{i}")
    await a.begin_turn(T, S, "last")
    assert len(await a.history(T, S, limit=50)) == 20
    assert a.statistics().stale_writes_total == 0


async def test_the_embedded_stores_have_no_epochs() -> None:
    from agentos.store.memory import MemoryStore

    store = MemoryStore()
    assert await store.begin_turn(T, S, "turn_1") is None
    assert await store.cancel_turn(T, S) is None
