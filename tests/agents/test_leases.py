"""Run leases and fencing on the real PostgreSQL journal, two nodes in one process (node ids given)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentos.agents.journal import RunRow
from agentos.agents.journal_pg import PgJournalStore
from agentos.agents.journal_store import LeaseLost
from agentos.agents.leases import LeaseKeeper
from agentos.config import CoordinationConfig, StoreConfig
from agentos.store import pg_pool


@pytest.fixture
async def nodes(pg: StoreConfig) -> AsyncIterator[tuple[PgJournalStore, PgJournalStore]]:
    stores = (
        PgJournalStore(pg, CoordinationConfig(run_lease_s=30), node="node-a"),
        PgJournalStore(pg, CoordinationConfig(run_lease_s=30), node="node-b"),
    )
    for store in stores:
        await store.open()
    yield stores
    for store in stores:
        await store.close()


async def create(store: PgJournalStore, run_id: str, session_id: str = "s1") -> None:
    spec_ref, put = store.journal.payload("acme", {"name": "ops"})
    row = RunRow(run_id, "acme", "ops", session_id, None, 0, spec_ref, "input", "running", None, None, 1, 1)
    await store.write([put, *store.journal.create_run(row)])
    store.adopt(run_id, 1)


class Keeper:
    """A `LeaseKeeper` whose callbacks record what they were told."""

    def __init__(self, store: PgJournalStore) -> None:
        self.claimed: dict[str, int] = {}
        self.lost: list[str] = []
        self.keeper = LeaseKeeper(store, on_claimed=self._claimed, on_lost=self.lost.extend, on_requests=self._none)

    async def _claimed(self, epochs: dict[str, int]) -> None:
        self.claimed.update(epochs)

    async def _none(self, requests: list[Any]) -> None:
        raise AssertionError(requests)


def event(store: PgJournalStore, run_id: str, seq: int) -> Any:
    return store.journal.event("acme", run_id, seq, "tool.result", "{}", 2)


async def test_a_paused_owner_cannot_write_after_a_takeover(nodes: tuple[PgJournalStore, PgJournalStore]) -> None:
    a, b = nodes
    await create(a, "run_1")
    await create(a, "run_2")
    b_keeper = Keeper(b)
    await b_keeper.keeper.claim()
    assert b_keeper.claimed == {}  # a live lease is never taken
    # A pauses past its lease (here: the lease is made to have expired), and B takes run_1 over.
    await a.query("UPDATE run_leases SET expires_at = now() - interval '1 second' WHERE run_id = 'run_1'")
    await b_keeper.keeper.claim()
    assert b_keeper.claimed == {"run_1": 2}
    b.adopt("run_1", 2)
    # A wakes up and writes to both runs in one batch: run_1's write is fenced, run_2's commits.
    lost, kept = await asyncio.gather(
        a.write([event(a, "run_1", 1)], run="run_1"), a.write([event(a, "run_2", 1)], run="run_2"),
        return_exceptions=True,
    )  # fmt: skip
    assert isinstance(lost, LeaseLost) and kept is None
    await b.write([event(b, "run_1", 1)], run="run_1")  # the new owner writes at epoch 2
    assert [e.seq for e in await b.load_events("acme", "run_1", 0)] == [1]
    assert [e.seq for e in await b.load_events("acme", "run_2", 0)] == [1]
    a_keeper = Keeper(a)
    await a_keeper.keeper.renew()
    assert a_keeper.lost == ["run_1"]  # A learns it at its next renewal, and keeps run_2


async def test_a_graceful_close_hands_the_runs_over_at_once(nodes: tuple[PgJournalStore, PgJournalStore]) -> None:
    a, b = nodes
    await create(a, "run_1")
    await a.close()
    b_keeper = Keeper(b)
    await b_keeper.keeper.claim()
    assert b_keeper.claimed == {"run_1": 2}


async def test_deleting_a_session_deletes_its_runs_children_and_unshared_payloads(
    nodes: tuple[PgJournalStore, PgJournalStore],
) -> None:
    a, _ = nodes
    await create(a, "run_1")
    await create(a, "run_1.2")
    await create(a, "run_9", session_id="s2")
    ref, put = a.journal.payload("acme", {"only": "run_1"})
    await a.write([put, *a.journal.begin_step("acme", "run_1.2", 1, "tool", "started", {"only": "run_1"}, 3)])
    assert await a.delete_session_runs("other", "s1") == []  # another tenant's session: nothing
    assert await a.delete_session_runs("acme", "s1") == ["run_1", "run_1.2"]
    assert await a.load_run("acme", "run_1") is None and await a.load_run("acme", "run_9") is not None
    left = {r[0] for r in await a.query("SELECT hash FROM payloads")}
    assert ref not in left and len(left) == 1  # the spec payload run_9 still refers to stays
    assert {r[0] for r in await a.query("SELECT run_id FROM run_leases")} == {"run_9"}


async def test_a_renewal_passes_over_a_lease_locked_by_a_batch_and_keeps_it(
    pg: StoreConfig, nodes: tuple[PgJournalStore, PgJournalStore]
) -> None:
    a, _ = nodes
    await create(a, "run_1")
    keeper = Keeper(a)
    batch = await pg_pool.connect(pg)  # holds the lease row FOR SHARE, as a writer batch does
    try:
        async with batch.transaction():
            await batch.execute("SELECT 1 FROM run_leases WHERE run_id = 'run_1' FOR SHARE")
            await asyncio.wait_for(keeper.keeper.renew(), 5)  # never waits for the batch
    finally:
        await batch.close()
    assert keeper.lost == []


async def test_a_broken_notify_connection_is_opened_again_at_once(nodes: tuple[PgJournalStore, PgJournalStore]) -> None:
    """The database drops the listening connection: the node listens again at once, and a
    request sent after that wakes it long before its next round (10 s with a 30 s lease)."""
    a, b = nodes
    await create(a, "run_1")
    heard: asyncio.Queue[list[Any]] = asyncio.Queue()
    keeper = LeaseKeeper(a, on_claimed=_nothing, on_lost=lambda _: None, on_requests=heard.put)
    await keeper.start()
    try:
        listener = keeper._listener  # this keeper's own connection, nobody else's
        assert listener is not None
        await b.query("SELECT pg_terminate_backend($1)", listener.get_server_pid())
        await b.query(
            "WITH r AS (INSERT INTO run_requests (tenant_id, run_id, body, created_ms)"
            " VALUES ('acme', 'run_1', '{\"kind\": \"cancel\"}', 1) RETURNING id)"
            " SELECT pg_notify('agentos_run_requests', 'run_1') FROM r"
        )
        requests = await asyncio.wait_for(heard.get(), 5)  # far sooner than the 10 s round
        assert requests == [("acme", "run_1", {"kind": "cancel"})]
    finally:
        await keeper.close()


async def _nothing(_: Any) -> None:
    return None
