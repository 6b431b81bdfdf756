"""`TriggerService` on a clock the test moves: the dedup horizon (a redelivery days later),
the rotation overlap's edge, and the dispatcher's outcomes, driven round by round. The runs
are the real server's (its RunService, journal and mock provider); the triggers live in a
real `triggers.db` of their own."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client import CollectorRegistry

from agentos.clock import wall_ms
from agentos.errors import Conflict, NotFound, Unauthorized
from agentos.mock.server import MockServer
from agentos.testing import RunningServer
from agentos.triggers.dispatcher import IDLE_POLL_MAX_S, LEASE_MS, Dispatcher, TriggerMetrics, WaitingForRoom
from agentos.triggers.records import DeliveryQuery, SecretRow, TriggerRow
from agentos.triggers.service import TriggerService
from agentos.triggers.signatures import decode_secret, derive_secret, encode_secret, sign
from agentos.triggers.sqlite_storage import SqliteTriggerStorage
from tests.triggers.webhooks import run_outcome, serve

DAY_MS = 24 * 3600 * 1000
T0 = 1_800_000_000_000


@dataclass
class Clock:
    ms: int = T0

    def __call__(self) -> int:
        return self.ms


@dataclass
class Setup:
    server: RunningServer
    service: TriggerService
    clock: Clock


@pytest.fixture
async def setup(tmp_path: Path, mock: MockServer) -> AsyncIterator[Setup]:
    server = await serve(tmp_path / "data", mock, {}, triggers={"rotation_overlap_s": 3600})
    clock = Clock()
    storage = SqliteTriggerStorage(tmp_path / "own-triggers.db")
    service = TriggerService(server.services.settings, storage, server.services.runs, b"p" * 32, now_ms=clock)
    await storage.open()  # no dispatcher task: the test runs its rounds
    yield Setup(server, service, clock)
    await service.close()
    await server.close()


async def deliver(
    setup: Setup, trigger: dict[str, str], webhook_id: str, body: bytes = b'{"n": 1}', secret: str = ""
) -> tuple[dict[str, object], bool]:
    ts = setup.clock.ms // 1000
    signature = sign(decode_secret(secret or trigger["secret"]), webhook_id, ts, body)
    headers = {"webhook-id": webhook_id, "webhook-timestamp": str(ts), "webhook-signature": signature}
    return await setup.service.deliver(await setup.service.find(trigger["trigger_id"]), headers, body)


async def test_a_redelivery_days_later_answers_the_first_run_until_the_horizon(
    setup: Setup, http: aiohttp.ClientSession
) -> None:
    trigger = await setup.service.create("default", "echo", "{payload}", "")
    first, new = await deliver(setup, trigger, "evt-1")
    assert new and await setup.service.dispatcher.round() == 1
    assert await run_outcome(http, setup.server.url, str(first["run_id"])) == "run.completed"
    setup.clock.ms += 3 * DAY_MS  # the sender's last retry of its schedule: signed again, now
    again, new = await deliver(setup, trigger, "evt-1")
    assert not new and again["run_id"] == first["run_id"] and again["status"] == "started"
    assert await setup.service.dispatcher.round() == 0  # nothing to start
    setup.clock.ms += 5 * DAY_MS  # past triggers.dedup_horizon_s (7 days): pruned, the id is new again
    await setup.service.dispatcher.prune()
    later, new = await deliver(setup, trigger, "evt-1")
    assert new and later["run_id"] != first["run_id"]


async def test_the_old_secret_works_until_the_overlap_ends(setup: Setup) -> None:
    trigger = await setup.service.create("default", "echo", "{payload}", "")
    rotated = await setup.service.rotate("default", trigger["trigger_id"])
    setup.clock.ms += 3600 * 1000 - 1000  # a second before the end
    assert (await deliver(setup, trigger, "a", secret=trigger["secret"]))[1]
    setup.clock.ms += 1000
    with pytest.raises(Unauthorized):
        await deliver(setup, trigger, "b", secret=trigger["secret"])
    assert (await deliver(setup, trigger, "c", secret=rotated["secret"]))[1]
    again = await setup.service.rotate("default", trigger["trigger_id"])  # the expired one is dropped
    assert [s["expires_ms"] for s in again["secrets"]] == [None, setup.clock.ms + 3600 * 1000]


async def test_what_waiting_cannot_fix_fails_the_delivery_and_nothing_else_does(setup: Setup) -> None:
    service, storage = setup.service, setup.service.storage
    gone = TriggerRow("trg_gone", "default", "no-such-agent", "{payload}", "", (SecretRow("ab", T0),), T0)
    await storage.create_trigger(gone, max_per_tenant=100)
    empty = await service.create("default", "echo", "{payload.missing}", "")  # renders to "": refused input
    deleted = await service.create("default", "echo", "{payload}", "")
    await deliver(setup, {"trigger_id": "trg_gone", "secret": _secret_of(gone)}, "g")
    await deliver(setup, empty, "e")
    await deliver(setup, deleted, "d")
    await service.delete("default", deleted["trigger_id"])  # after its delivery was accepted
    assert await service.dispatcher.round() == 3
    reasons = {
        "trg_gone": (await storage.get_delivery("default", "trg_gone", "g")),
        empty["trigger_id"]: (await storage.get_delivery("default", empty["trigger_id"], "e")),
        deleted["trigger_id"]: (await storage.get_delivery("default", deleted["trigger_id"], "d")),
    }
    assert {k: (v.status, v.reason) for k, v in reasons.items() if v is not None} == {
        "trg_gone": ("failed", "agent_not_found"),
        empty["trigger_id"]: ("failed", "invalid_input"),
        deleted["trigger_id"]: ("failed", "trigger_deleted"),
    }
    registry = CollectorRegistry()
    service.register_metrics(registry)
    assert registry.get_sample_value("agentos_trigger_runs_failed_total") == 3


async def test_a_start_refused_for_now_is_postponed_not_dropped(setup: Setup, http: aiohttp.ClientSession) -> None:
    trigger = await setup.service.create("default", "echo", "{payload}", "")
    answer, _ = await deliver(setup, trigger, "later")
    setup.server.services.runs.accepting = False  # as while draining: ShuttingDown
    assert await setup.service.dispatcher.round() == 1
    row = await setup.service.storage.get_delivery("default", trigger["trigger_id"], "later")
    assert row is not None and row.status == "queued" and row.next_attempt_ms > setup.clock.ms
    assert await setup.service.dispatcher.round() == 0  # not due yet
    setup.server.services.runs.accepting = True
    setup.clock.ms = row.next_attempt_ms
    assert await setup.service.dispatcher.round() == 1
    assert await run_outcome(http, setup.server.url, str(answer["run_id"])) == "run.completed"


async def test_the_crash_window_between_start_and_mark_starts_nothing_twice(
    setup: Setup, mock: MockServer, http: aiohttp.ClientSession
) -> None:
    trigger = await setup.service.create("default", "echo", "{payload}", "")
    answer, _ = await deliver(setup, trigger, "once")
    run_id = str(answer["run_id"])
    # the run started, then the node died before marking the delivery: the run exists, the delivery is queued
    await setup.server.services.runs.start_run("default", "echo", '{"n": 1}', run_id=run_id)
    assert await run_outcome(http, setup.server.url, run_id) == "run.completed"
    assert await setup.service.dispatcher.round() == 1
    row = await setup.service.storage.get_delivery("default", trigger["trigger_id"], "once")
    assert row is not None and row.status == "started"
    assert mock.stats.requests == 1


async def test_unknown_and_other_tenants_triggers_are_not_found(setup: Setup) -> None:
    trigger = await setup.service.create("default", "echo", "{payload}", "")
    for call in (
        setup.service.get("other", trigger["trigger_id"]),
        setup.service.rotate("other", trigger["trigger_id"]),
        setup.service.delete("other", trigger["trigger_id"]),
        setup.service.deliveries("other", trigger["trigger_id"], DeliveryQuery(10)),
        setup.service.find("trg_nope"),
    ):
        with pytest.raises(NotFound):
            await call
    with pytest.raises(NotFound) as caught:
        await setup.service.create("default", "nobody", "{payload}", "")
    assert caught.value.code == "agent_not_found"


async def test_a_failed_delivery_retried_once_its_agent_is_back_runs_under_its_first_run_id(
    setup: Setup, http: aiohttp.ClientSession
) -> None:
    service, storage = setup.service, setup.service.storage
    later = TriggerRow("trg_later", "default", "later", "{payload}", "", (SecretRow("ab", T0),), T0)
    await storage.create_trigger(later, max_per_tenant=100)
    answer, _ = await deliver(setup, {"trigger_id": "trg_later", "secret": _secret_of(later)}, "evt")
    assert await service.dispatcher.round() == 1
    failed = await service.delivery("default", "trg_later", "evt")
    assert (failed["status"], failed["reason"]) == ("failed", "agent_not_found")
    await setup.server.services.runs.create_agent("default", {"name": "later", "tools": []})  # fixed
    retried = await service.retry("default", "trg_later", "evt")
    assert (retried["status"], retried["reason"], retried["attempts"]) == ("queued", None, 0)
    with pytest.raises(Conflict):  # queued: nothing to retry
        await service.retry("default", "trg_later", "evt")
    with pytest.raises(NotFound):
        await service.retry("default", "trg_later", "no-such-event")
    assert await service.dispatcher.round() == 1  # at the same clock: due now
    assert await run_outcome(http, setup.server.url, str(answer["run_id"])) == "run.completed"
    assert (await service.delivery("default", "trg_later", "evt"))["status"] == "started"


def _secret_of(trigger: TriggerRow) -> str:
    """The secret a create would have shown (the fixture's pepper)."""
    return encode_secret(derive_secret(b"p" * 32, trigger.trigger_id, trigger.secrets[0].nonce))


async def test_a_disabled_tenants_trigger_answers_404_and_its_queued_deliveries_fail(
    tmp_path: Path, mock: MockServer
) -> None:
    server = await serve(tmp_path / "data", mock, {})
    enabled = {"default": True}
    storage = SqliteTriggerStorage(tmp_path / "own-triggers.db")
    service = TriggerService(
        server.services.settings, storage, server.services.runs, b"p" * 32, tenant_enabled=lambda t: enabled[t]
    )
    await storage.open()
    try:
        trigger = await service.create("default", "echo", "{payload}", "")
        setup = Setup(server, service, Clock(wall_ms()))
        await deliver(setup, trigger, "before")  # accepted while the tenant is enabled
        enabled["default"] = False
        with pytest.raises(NotFound):  # exactly like a trigger that does not exist
            await service.find(trigger["trigger_id"])
        assert await service.dispatcher.round() == 1
        failed = await service.delivery("default", trigger["trigger_id"], "before")
        assert failed["status"] == "failed" and failed["reason"] == "tenant_disabled"
        enabled["default"] = True  # enabled again: the tenant retries what failed meanwhile
        assert (await service.retry("default", trigger["trigger_id"], "before"))["status"] == "queued"
        assert await service.dispatcher.round() == 1
        assert (await service.delivery("default", trigger["trigger_id"], "before"))["status"] == "started"
    finally:
        await service.close()
        await server.close()


async def test_a_restarted_single_node_takes_back_its_own_leases_at_once(setup: Setup) -> None:
    trigger = await setup.service.create("default", "echo", "{payload}", "")
    await deliver(setup, trigger, "leased")
    # The previous process claimed it and died before starting its run: the lease still runs.
    assert len(await setup.service.storage.claim("local", setup.clock.ms, 10_000, 10)) == 1
    waiting = TriggerService(
        setup.server.services.settings,
        setup.service.storage,
        setup.server.services.runs,
        b"p" * 32,
        now_ms=setup.clock,
    )
    assert await waiting.dispatcher.round() == 1  # the same clock: no lease expired, yet taken back
    assert await waiting.dispatcher.round() == 0  # once: reclaiming ends with the first short round
    started = await setup.service.delivery("default", trigger["trigger_id"], "leased")
    assert started["status"] == "started"


async def test_an_idle_dispatcher_looks_again_when_another_nodes_lease_ends(setup: Setup) -> None:
    """A delivery another node claimed and never started (that node died): however far the
    dispatcher has backed off, it looks again just after the lease ends, not up to 16 s later."""
    dispatcher = setup.service.dispatcher
    assert await dispatcher.round() == 0  # the first round: reclaiming (one node) is over
    trigger = await setup.service.create("default", "echo", "{payload}", "")
    await deliver(setup, trigger, "orphaned")
    assert len(await setup.service.storage.claim("dead-node", setup.clock.ms, LEASE_MS, 10)) == 1
    setup.clock.ms += 2_000
    assert await dispatcher.round() == 0
    waits = [wait for _ in range(12) if (wait := dispatcher.wait_s(0)) is not None]  # idle rounds', backing off
    assert len(waits) == 12
    assert waits[1] == 2 * waits[0]  # doubling ...
    assert max(waits) == waits[-1] == (LEASE_MS - 2_000 + 1) / 1000 < IDLE_POLL_MAX_S  # ... up to the lease's end
    setup.clock.ms += LEASE_MS - 2_000 + 1
    assert await dispatcher.round() == 1
    assert dispatcher.wait_s(1) == waits[0] / 2  # found work: back to the base
    started = await setup.service.delivery("default", trigger["trigger_id"], "orphaned")
    assert (started["status"], started["attempts"]) == ("started", 2)


async def test_a_delivery_refused_at_the_tenants_cap_starts_when_a_place_frees(
    tmp_path: Path, mock_factory: Any, http: aiohttp.ClientSession
) -> None:
    """Refused at `max_active_runs`, a delivery does not wait out its retry: the tenant's run
    that ends makes it due at once (the clock here never reaches its retry)."""
    mock: MockServer = await mock_factory(ttft_ms=200, tokens=2)  # the first run outlasts the second's start
    server = await serve(tmp_path / "data", mock, {}, tenant_limits={"max_active_runs": 1})
    clock = Clock()
    service = TriggerService(
        server.services.settings, SqliteTriggerStorage(tmp_path / "t.db"), server.services.runs, b"p" * 32, now_ms=clock
    )
    await service.storage.open()  # no dispatcher task: the test runs its rounds
    stop = server.services.runs.when_runs_free(service.dispatcher.room_freed)
    freed = asyncio.Event()
    server.services.runs.when_runs_free(lambda tenant, runs: freed.set())  # told after the dispatcher
    try:
        trigger = await service.create("default", "echo", "{payload}", "")
        setup = Setup(server, service, clock)
        answers = [(await deliver(setup, trigger, webhook_id))[0] for webhook_id in ("a", "b")]
        assert await service.dispatcher.round() == 2  # one starts, one is refused: no place
        rows = [await service.storage.get_delivery("default", trigger["trigger_id"], w) for w in ("a", "b")]
        assert sorted(r.status for r in rows if r is not None) == ["queued", "started"]
        (waiting,) = [r for r in rows if r is not None and r.status == "queued"]
        assert waiting.next_attempt_ms > clock.ms
        (running,) = [a["run_id"] for a in answers if a["run_id"] != waiting.run_id]
        assert await service.dispatcher.round() == 0  # not due, and no place freed yet
        assert await run_outcome(http, server.url, str(running)) == "run.completed"
        await asyncio.wait_for(freed.wait(), 10)
        assert await service.dispatcher.round() == 1  # the same clock: due because a place freed
        assert await run_outcome(http, server.url, waiting.run_id) == "run.completed"
    finally:
        stop()
        await service.close()
        await server.close()


async def test_a_place_freed_on_this_node_hurries_a_delivery_another_node_postponed(
    tmp_path: Path, mock_factory: Any, http: aiohttp.ClientSession
) -> None:
    """Node A postponed the delivery at the tenant's cap and does not hear the run that ends
    here; this node (B) learned from its round's backlog that the tenant waits, so the place
    that frees here makes the delivery due and B starts it, on the same clock (no retry)."""
    mock: MockServer = await mock_factory(ttft_ms=200, tokens=2)
    server = await serve(tmp_path / "data", mock, {}, tenant_limits={"max_active_runs": 1})
    clock = Clock()
    runs = server.services.runs
    storage = SqliteTriggerStorage(tmp_path / "t.db")
    service = TriggerService(server.services.settings, storage, runs, b"p" * 32, now_ms=clock)
    await service.storage.open()  # no dispatcher task: the test runs the rounds of both nodes
    node_a = service.dispatcher  # hears no run's end: another node's
    node_b = Dispatcher(service.storage, runs, service.config, "node-b", clock, TriggerMetrics())
    stop = runs.when_runs_free(node_b.room_freed)
    freed = asyncio.Event()
    runs.when_runs_free(lambda tenant, count: freed.set())  # told after node B
    try:
        trigger = await service.create("default", "echo", "{payload}", "")
        setup = Setup(server, service, clock)
        answers = [(await deliver(setup, trigger, webhook_id))[0] for webhook_id in ("a", "b")]
        assert await node_a.round() == 2  # one starts, one is postponed by node A
        rows = [await service.storage.get_delivery("default", trigger["trigger_id"], w) for w in ("a", "b")]
        (waiting,) = [r for r in rows if r is not None and r.status == "queued"]
        assert waiting.next_attempt_ms > clock.ms
        assert await node_b.round() == 0  # not due; its backlog names the tenant that waits
        (running,) = [a["run_id"] for a in answers if a["run_id"] != waiting.run_id]
        assert await run_outcome(http, server.url, str(running)) == "run.completed"
        await asyncio.wait_for(freed.wait(), 10)
        assert await node_b.round() == 1  # the same clock: due because a place freed here
        assert await run_outcome(http, server.url, waiting.run_id) == "run.completed"
    finally:
        stop()
        await service.close()
        await server.close()


def test_a_place_freed_is_counted_for_the_tenant_refused_and_for_a_full_server() -> None:
    room = WaitingForRoom()
    assert not room.freed("acme", 1)  # nobody waits: the dispatcher is not woken
    room.refused("acme")
    assert room.freed("acme", 1) and not room.freed("other", 2)
    room.refused(WaitingForRoom.ANY_TENANT)  # the server was full: any tenant's place will do
    assert room.freed("other", 2) and room.freed("acme", 1)
    assert room.take() == {"acme": 2, None: 3}
    assert room.take() == {}
    room.none_left("acme")
    assert room.freed("acme", 1) and room.take() == {None: 1}
