"""Run leases and fencing on the real PostgreSQL journal, two nodes in one process (node ids given)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest

from agentos.agents.leases import LeaseKeeper, Request, send_request
from agentos.config import CoordinationConfig, StoreConfig
from agentos.errors import LeaseLost
from agentos.journal.journal import RunRow
from agentos.journal.postgres import PgJournalStore
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

    async def _none(self, requests: list[Any]) -> dict[int, dict[str, Any] | None]:
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
        a.write([event(a, "run_1", 1)], run="run_1"),
        a.write([event(a, "run_2", 1)], run="run_2"),
        return_exceptions=True,
    )
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

    async def hear(requests: list[Any]) -> dict[int, dict[str, Any] | None]:
        await heard.put(requests)
        return {}  # none settled: they stay queued

    keeper = LeaseKeeper(a, on_claimed=_nothing, on_lost=lambda _: None, on_requests=hear)
    await keeper.start()
    try:
        listener = keeper._listener  # this keeper's own connection, nobody else's
        assert listener is not None
        await b.query("SELECT pg_terminate_backend($1)", listener.get_server_pid())
        await send_request(b, "acme", "run_1", '{"kind": "cancel"}', 1)  # the row and its NOTIFY, as a node sends it
        requests = await asyncio.wait_for(heard.get(), 5)  # far sooner than the 10 s round
        assert [(r.tenant_id, r.run_id, r.body) for r in requests] == [("acme", "run_1", {"kind": "cancel"})]
    finally:
        await keeper.close()


async def _nothing(_: Any) -> None:
    return None


async def request(store: PgJournalStore, run_id: str) -> None:
    await store.query(
        "INSERT INTO run_requests (tenant_id, run_id, body, created_ms) VALUES ('acme', $1, $2, 1)",
        run_id,
        '{"kind": "cancel"}',
    )


async def test_a_request_stays_queued_until_the_owner_is_done_with_it(
    nodes: tuple[PgJournalStore, PgJournalStore],
) -> None:
    a, _ = nodes
    await create(a, "run_1")
    await create(a, "run_2")
    await request(a, "run_1")
    await request(a, "run_2")
    await request(a, "run_2")
    seen: list[list[Request]] = []
    done: dict[int, dict[str, Any] | None] = {}

    async def settle(requests: list[Request]) -> dict[int, dict[str, Any] | None]:
        seen.append(requests)
        return dict(done)

    keeper = LeaseKeeper(a, on_claimed=_nothing, on_lost=lambda _: None, on_requests=settle)
    await keeper.take_requests()  # no run can take its request yet: all stay
    done[seen[0][0].id] = None  # run_1's is applied now
    refusal = {"status": 409, "code": "not_waiting", "message": "no"}
    done[seen[0][1].id] = refusal  # run_2's first is refused for good
    await keeper.take_requests()
    await keeper.take_requests()  # the refused one is not handed over again
    runs = [[r.run_id for r in batch] for batch in seen]
    assert runs == [["run_1", "run_2", "run_2"], ["run_1", "run_2", "run_2"], ["run_2"]]
    left = await a.query("SELECT run_id, outcome FROM run_requests ORDER BY id")
    assert [(r[0], r[1] and msgspec.json.decode(r[1])) for r in left] == [("run_2", refusal), ("run_2", None)]
    await a.write(a.journal.end_run("run_2", "completed", 2, reason="done"), run="run_2")
    assert await a.query("SELECT 1 FROM run_requests") == []  # the run's end takes what is left for it


async def test_the_runs_of_a_dead_node_are_shared_by_the_survivors(pg: StoreConfig) -> None:
    a, b, c = stores = [PgJournalStore(pg, CoordinationConfig(run_lease_s=30), node=f"node-{n}") for n in "abc"]
    for store in stores:
        await store.open()
    try:
        for i in range(20):
            await create(a, f"run_{i:02}")
        await create(a, "run_00.1")  # a child run: it goes with its parent, and is not counted in a share
        survivors = [Keeper(b), Keeper(c)]
        for survivor in survivors:
            await survivor.keeper.renew()  # B and C are live nodes (A is dead: it never renews)
        await a.query("UPDATE run_leases SET expires_at = now() - interval '1 second'")
        await survivors[0].keeper.claim()  # first come: 20 roots over 2 live nodes
        assert len(survivors[0].claimed) == 10 + ("run_00.1" in survivors[0].claimed)  # old code: all 21
        assert survivors[0].keeper.more
        await survivors[1].keeper.claim()  # 10 left over 2 nodes
        assert len(survivors[1].claimed) == 5 + ("run_00.1" in survivors[1].claimed)
        for _ in range(10):  # the rounds that come back after a short pause take the rest
            for survivor in survivors:
                await survivor.keeper.claim()
        claimed = survivors[0].claimed.keys() | survivors[1].claimed.keys()
        assert claimed == {f"run_{i:02}" for i in range(20)} | {"run_00.1"}
        assert not survivors[0].keeper.more and not survivors[1].keeper.more
        # In turns here (10, 5, 3, 1, 1): 14 and 6. Live nodes claim at random moments, so closer to even.
        assert [sum("." not in run for run in survivor.claimed) for survivor in survivors] == [14, 6]
        assert ("run_00" in survivors[0].claimed) == ("run_00.1" in survivors[0].claimed)
    finally:
        for store in stores:
            await store.close()
