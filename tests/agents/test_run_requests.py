"""Requests (answers) sent to the node that took a run over, on the real PostgreSQL journal:
services in one process, each with its own journal store and lease keeper, on one schema."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import msgspec
import pytest

from agentos.agents.cluster import REQUEST_WAIT_S
from agentos.agents.service import RunService
from agentos.config import CoordinationConfig, Settings, StoreConfig
from agentos.errors import Conflict
from agentos.providers.base import ChatRequest, Completion
from agentos.store import pg_pool
from agentos.testing import eventually, standalone_driver
from agentos.testing.tcp_proxy import TcpProxy
from tests.agents.conftest import collect
from tests.agents.fakes import ScriptedProvider, answer, call, tool_messages_since_user

AGENTS: dict[str, dict[str, Any]] = {"asker": {"tools": ["ask_human"]}}


def ask_once(request: ChatRequest) -> Completion:
    return call("ask_human", {"question": "go on?"}) if tool_messages_since_user(request) < 1 else answer("done")


def ask_twice(request: ChatRequest) -> Completion:
    return call("ask_human", {"question": "go on?"}) if tool_messages_since_user(request) < 2 else answer("done")


async def wait_for_human(service: RunService, run_id: str, n: int, timeout_s: float = 10.0) -> dict[str, Any]:
    """The run's pending request once it asked a human `n` times."""
    asked = 0
    async with asyncio.timeout(timeout_s):
        async for event in service.events("default", run_id):
            asked += event.type == "human.requested"
            if asked == n:
                break
    info = await service.get_run("default", run_id)
    pending: dict[str, Any] = info["pending"]
    return pending


async def sql(pg: StoreConfig, statement: str) -> list[tuple[Any, ...]]:
    conn = await pg_pool.connect(pg)
    try:
        return [tuple(row) for row in await conn.fetch(statement)]
    finally:
        await conn.close()


@pytest.fixture
async def nodes(tmp_path: Path, pg: StoreConfig) -> AsyncIterator[Any]:
    services: list[RunService] = []

    async def node(
        name: str,
        *,
        lease_s: float = 30.0,
        request_timeout_s: float = 10.0,
        provider: ScriptedProvider | None = None,
        **kwargs: Any,
    ) -> RunService:
        store = msgspec.structs.replace(pg, postgres_request_timeout_s=request_timeout_s)
        settings = Settings(store=store, coordination=CoordinationConfig(run_lease_s=lease_s), agents=AGENTS)
        service = RunService(
            provider or ScriptedProvider(ask_twice),
            tmp_path / name,
            settings,
            driver=standalone_driver(settings, **kwargs),
        )
        await service.start()
        services.append(service)
        return service

    yield node
    for service in services:
        await service.close(drain_s=0)


async def test_an_answer_reaches_a_run_whose_takeover_failed_midway(nodes: Any, pg: StoreConfig) -> None:
    sender = await nodes("sender")  # up before the run's owner goes: it takes nothing over here
    owner = await nodes("owner")
    run_id = await owner.start_run("default", "asker", "x")
    pending = await wait_for_human(owner, run_id, 1)
    await owner.close(drain_s=0)  # its lease expires now: the next node to claim takes the run over
    lock = await pg_pool.connect(pg)
    try:
        async with lock.transaction():  # the taker claims the lease, then cannot read the run's row
            await lock.execute("LOCK TABLE runs IN ACCESS EXCLUSIVE MODE")
            taker = await nodes("taker", lease_s=1.0, request_timeout_s=0.5)
    finally:
        await lock.close()
    # The run is the taker's, not resumed: the answer goes there and takes effect once it is
    # (within about a lease; on the old code never: the taker held the run without resuming it).
    await sender.answer("default", run_id, pending["operation_id"], "yes")
    await wait_for_human(taker, run_id, 2, timeout_s=20.0)
    assert await sql(pg, "SELECT count(*) FROM run_requests") == [(0,)]  # applied, then deleted


async def test_a_run_taken_back_after_another_node_ran_it_resumes_from_the_journal(nodes: Any, pg: StoreConfig) -> None:
    c = await nodes("c")
    run_id = await c.start_run("default", "asker", "x")
    first = await wait_for_human(c, run_id, 1)
    await sql(pg, "UPDATE run_leases SET expires_at = now() - interval '1 second'")  # C pauses past its lease
    d = await nodes("d")  # takes the run over as it starts, and runs it on to its next wait
    await d.answer("default", run_id, first["operation_id"], "yes")
    second = await wait_for_human(d, run_id, 2)
    await d.close(drain_s=0)  # its lease expires now
    # C claims the run back before a renewal told it that it had lost it: what C holds in memory
    # (waiting for the first answer) is stale, so it lets the run go and resumes it when claimed again.
    assert c._cluster is not None
    await c._cluster.keeper.claim()
    await sql(pg, "UPDATE run_leases SET expires_at = now() - interval '1 second'")
    await c._cluster.keeper.claim()
    await c.answer("default", run_id, second["operation_id"], "yes")  # on the old code: operation_mismatch
    events = [e.type for e in await collect(c, run_id)]
    assert events[-1] == "run.completed" and events.count("human.answered") == 2


async def test_an_answer_that_reaches_an_owner_shutting_down_is_applied_by_the_next(
    nodes: Any, pg: StoreConfig
) -> None:
    sender = await nodes("sender")
    provider = ScriptedProvider(ask_twice, gate_at=2)  # the second run's first model call waits
    owner = await nodes("owner", provider=provider)
    waiting = await owner.start_run("default", "asker", "x")
    pending = await wait_for_human(owner, waiting, 1)
    await owner.start_run("default", "asker", "y")
    await provider.entered.wait()
    closing = asyncio.create_task(owner.close(drain_s=10))  # refuses answers, waits for the working run
    await asyncio.sleep(0)  # lets close() start: nothing to wait on before it sets the flag
    assert not owner.accepting
    answered = asyncio.create_task(sender.answer("default", waiting, pending["operation_id"], "yes"))

    async def queued() -> bool:
        return await sql(pg, "SELECT count(*) FROM run_requests") == [(1,)]

    await eventually(queued, 10.0, "the answer to be sent")
    assert owner._cluster is not None
    await owner._cluster.keeper.take_requests()  # the owner cannot apply it any more: it stays
    assert await queued()
    provider.gate.set()
    await closing  # its leases expire now
    taker = await nodes("taker", provider=ScriptedProvider(ask_once))  # takes both runs over, applies the answer
    assert (await collect(taker, waiting))[-1].type == "run.completed"
    assert (await answered)["status"] != "waiting_human"  # the sender waited for it to go on
    assert await sql(pg, "SELECT count(*) FROM run_requests") == [(0,)]


async def resumed_not_started(nodes: Any, pg: StoreConfig, **kwargs: Any) -> tuple[RunService, str, asyncio.Task[None]]:
    """Node d with a run it just took over and resumed: its task is created and has not run yet."""
    provider = ScriptedProvider(ask_once, gate_at=1)  # the run's first model call waits
    c = await nodes("c", provider=provider)
    run_id = await c.start_run("default", "asker", "x")
    await provider.entered.wait()
    d = await nodes("d", **kwargs)  # c's run holds its lease: d takes nothing at start
    await c.close(drain_s=0)  # the run stays "running" in the journal
    assert d._cluster is not None
    await sql(pg, f"UPDATE run_leases SET owner = '{d._cluster._store.node}', epoch = epoch + 1")  # d claims it
    await d._cluster._claimed({run_id: 2})  # no await after the task's creation: it has not run
    task = d._runs.handles[run_id].task
    assert task is not None and not task.done()
    return d, run_id, task


async def test_a_run_lost_before_its_task_started_leaves_nothing_behind(nodes: Any, pg: StoreConfig) -> None:
    d, run_id, task = await resumed_not_started(nodes, pg, max_active_runs=1)
    assert d._cluster is not None
    # A renewal finds the lease gone (another node claimed it meanwhile) before the task ran: the
    # cancel skips the whole of `_drive`, its `finally` included.
    d._cluster._lost([run_id])
    await asyncio.wait([task], timeout=5.0)
    assert d._runs.driver.kernel.run_state(run_id) is None  # on the old code: RUNNING, for good
    assert d._runs.driver.kernel.statistics().active_runs == 0
    await d.start_run("default", "asker", "y")  # the run gate (1) is free; on the old code: 429
    # Taken back later, the run resumes from the journal and works on (on the old code: never started).
    await sql(pg, f"UPDATE run_leases SET expires_at = now() - interval '1 second' WHERE run_id = '{run_id}'")
    await d._cluster.keeper.claim()
    assert (await collect(d, run_id, until="human.requested"))[-1].type == "human.requested"


async def test_a_run_terminated_before_its_task_started_ends_cancelled(nodes: Any, pg: StoreConfig) -> None:
    d, run_id, _ = await resumed_not_started(nodes, pg)
    async with asyncio.timeout(5.0):  # on the old code: waits for good for an end nobody records
        info = await d.terminate("default", run_id, forward=False)
    assert info["status"] == "cancelled"
    assert d._runs.driver.kernel.run_state(run_id) is None
    assert (await collect(d, run_id))[-1].type == "run.cancelled"


async def test_an_answer_the_owner_refuses_reaches_its_sender(nodes: Any, pg: StoreConfig) -> None:
    sender = await nodes("sender")
    owner = await nodes("owner")
    run_id = await owner.start_run("default", "asker", "x")
    operation_id = (await wait_for_human(owner, run_id, 1))["operation_id"]
    # Two answers to the one question, both checked on the sender against the journal while the
    # run waits: the owner applies the first and refuses the second, as not waiting (the run is
    # still on its next model call) or as a mismatch (it already asks its next question).
    results = await asyncio.gather(
        sender.answer("default", run_id, operation_id, "yes"),
        sender.answer("default", run_id, operation_id, "no"),
        return_exceptions=True,
    )
    refused = [r for r in results if isinstance(r, BaseException)]
    assert len(refused) == 1, results  # on the old code: both answered as if applied
    assert isinstance(refused[0], Conflict) and refused[0].code in ("not_waiting", "operation_mismatch"), refused
    assert await sql(pg, "SELECT count(*) FROM run_requests") == [(0,)]  # the sender read it, then deleted it
    await wait_for_human(owner, run_id, 2)  # the run went on with the first answer alone
    assert await sql(pg, "SELECT count(*) FROM run_events WHERE type = 'human.answered'") == [(1,)]


async def test_an_answer_kept_while_the_run_works_is_refused_once_it_waits_again(nodes: Any, pg: StoreConfig) -> None:
    sender = await nodes("sender")
    provider = ScriptedProvider(ask_twice, gate_at=2)  # the model call after the first answer waits
    owner = await nodes("owner", provider=provider)  # its next round of requests is a lease third (10 s) away
    run_id = await owner.start_run("default", "asker", "x")
    operation_id = (await wait_for_human(owner, run_id, 1))["operation_id"]
    await sender.answer("default", run_id, operation_id, "yes")
    await provider.entered.wait()  # the run works towards its next question
    # A second answer to the same question, checked on the sender before the first was applied,
    # reaches the owner now (its NOTIFY woke the owner, here: the explicit round).
    body = dict(kind="answer", operation_id=operation_id, answer="no", approve=None, args_hash=None)
    values = f"('default', '{run_id}', '{msgspec.json.encode(body).decode()}', 0)"
    insert = f"INSERT INTO run_requests (tenant_id, run_id, body, created_ms) VALUES {values} RETURNING id"
    [(request_id,)] = await sql(pg, insert)  # without its NOTIFY: the round below is the one that sees it
    assert owner._cluster is not None and sender._cluster is not None
    await owner._cluster.keeper.take_requests()  # kept: the run is not waiting yet
    provider.gate.set()  # the run asks its second question: the owner refuses the answer then
    with pytest.raises(Conflict) as refused:  # on the old code: the sender's wait ran out first
        await sender._cluster.settled(request_id, REQUEST_WAIT_S)
    assert refused.value.code == "operation_mismatch"
    assert await sql(pg, "SELECT count(*) FROM run_requests") == [(0,)]
    await wait_for_human(owner, run_id, 2)
    assert await sql(pg, "SELECT count(*) FROM run_events WHERE type = 'human.answered'") == [(1,)]


async def test_a_run_whose_database_went_away_goes_on_when_it_returns(tmp_path: Path, pg: StoreConfig) -> None:
    target = urlsplit(pg.postgres_url)
    async with TcpProxy(target.hostname or "127.0.0.1", target.port or 5432) as proxy:
        proxied = target._replace(netloc=f"{target.username}@127.0.0.1:{proxy.port}").geturl()
        store = msgspec.structs.replace(pg, postgres_url=proxied, postgres_request_timeout_s=1.0)
        settings = Settings(store=store, coordination=CoordinationConfig(run_lease_s=2.0), agents=AGENTS)
        provider = ScriptedProvider(ask_once, gate_at=1)  # the run's first model call waits
        service = RunService(provider, tmp_path / "node", settings, driver=standalone_driver(settings))
        await service.start()
        try:
            run_id = await service.start_run("default", "asker", "x")
            await provider.entered.wait()
            await proxy.cut()  # PostgreSQL restarts while the model call is under way
            provider.gate.set()  # its step cannot be journaled: the run stops here, unfinished

            async def lease_expired() -> bool:  # read past the proxy, straight from PostgreSQL
                return await sql(pg, "SELECT expires_at < now() FROM run_leases") == [(True,)]

            await eventually(lease_expired, 10.0, "the run's lease to expire while the node is cut off")
            await proxy.restore()
            # The node claims the run again and resumes it from the journal: it asks its question.
            pending = await wait_for_human(service, run_id, 1, timeout_s=20.0)
            await service.answer("default", run_id, pending["operation_id"], "yes")
            assert (await collect(service, run_id))[-1].type == "run.completed"
        finally:
            await service.close(drain_s=0)
