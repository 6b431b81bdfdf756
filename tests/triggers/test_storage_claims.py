"""The `TriggerStorage` contract, on `triggers.db` and on PostgreSQL: the dispatcher's side
(claims and their leases, postponing, outcomes, the backlog, pruning)."""

from __future__ import annotations

import asyncio

from agentos.triggers.records import Backlog, DeliveryQuery, DeliveryRow, TriggerRow
from agentos.triggers.storage import TriggerStorage
from tests.triggers.conftest import delivery, trigger

LEASE = 1000


async def queue(storage: TriggerStorage, count: int, t: TriggerRow | None = None) -> list[DeliveryRow]:
    t = t or trigger()
    rows = [delivery(t, f"msg_{i:03d}", received_ms=100 + i) for i in range(count)]
    for row in reversed(rows):  # accepted in another order than received: claims go by received_ms
        await storage.accept(row)
    return rows


def keys(rows: list[DeliveryRow]) -> list[str]:
    return [r.webhook_id for r in rows]


async def test_claims_are_oldest_first_leased_and_counted(storage: TriggerStorage) -> None:
    rows = await queue(storage, 3)
    claimed = await storage.claim("node-a", now_ms=500, lease_ms=LEASE, limit=2)
    assert keys(claimed) == keys(rows[:2])
    assert [r.attempts for r in claimed] == [1, 1]
    assert all(r.status == "queued" and r.run_id == rows[i].run_id for i, r in enumerate(claimed))

    assert keys(await storage.claim("node-b", now_ms=600, lease_ms=LEASE, limit=10)) == keys(rows[2:])
    assert await storage.claim("node-b", now_ms=700, lease_ms=LEASE, limit=10) == []  # all leased
    assert await storage.claim("node-a", now_ms=700, lease_ms=LEASE, limit=10) == []  # its own too
    assert (await storage.backlog()).queued == 3  # leased is still queued


async def test_an_expired_lease_is_claimed_again(storage: TriggerStorage) -> None:
    await queue(storage, 1)
    await storage.claim("node-a", now_ms=500, lease_ms=LEASE, limit=10)
    assert await storage.claim("node-b", now_ms=500 + LEASE - 1, lease_ms=LEASE, limit=10) == []
    again = await storage.claim("node-b", now_ms=500 + LEASE + 1, lease_ms=LEASE, limit=10)
    assert [r.attempts for r in again] == [2]

    # node-a's lease is gone: its outcome changes nothing; node-b's does
    await storage.mark_failed("node-a", again[0].trigger_id, again[0].webhook_id, "late", now_ms=2000)
    assert (await storage.backlog()).queued == 1
    await storage.mark_started("node-b", again[0].trigger_id, again[0].webhook_id, now_ms=2000)
    assert (await storage.backlog()).queued == 0


async def test_a_started_delivery_is_not_claimed_again(storage: TriggerStorage) -> None:
    (row,) = await queue(storage, 1)
    await storage.claim("node-a", now_ms=500, lease_ms=LEASE, limit=10)
    await storage.mark_started("node-a", row.trigger_id, row.webhook_id, now_ms=600)
    stored = await storage.get_delivery(row.tenant_id, row.trigger_id, row.webhook_id)
    assert stored is not None and stored.status == "started" and stored.attempts == 1
    assert await storage.claim("node-b", now_ms=10_000_000, lease_ms=LEASE, limit=10) == []
    assert (await storage.backlog()).queued == 0


async def test_a_failed_delivery_keeps_its_reason(storage: TriggerStorage) -> None:
    (row,) = await queue(storage, 1)
    await storage.claim("node-a", now_ms=500, lease_ms=LEASE, limit=10)
    await storage.mark_failed("node-a", row.trigger_id, row.webhook_id, "agent_not_found", now_ms=600)
    stored = await storage.get_delivery(row.tenant_id, row.trigger_id, row.webhook_id)
    assert stored is not None and (stored.status, stored.reason) == ("failed", "agent_not_found")
    assert await storage.claim("node-a", now_ms=10_000_000, lease_ms=LEASE, limit=10) == []


async def test_a_postponed_delivery_waits_until_its_next_attempt(storage: TriggerStorage) -> None:
    (row,) = await queue(storage, 1)
    await storage.claim("node-a", now_ms=500, lease_ms=LEASE, limit=10)
    await storage.postpone("node-a", row.trigger_id, row.webhook_id, next_attempt_ms=800)
    assert await storage.claim("node-b", now_ms=799, lease_ms=LEASE, limit=10) == []
    again = await storage.claim("node-b", now_ms=800, lease_ms=LEASE, limit=10)  # before node-a's lease ends
    assert [(r.attempts, r.next_attempt_ms) for r in again] == [(2, 800)]


async def test_only_a_failed_delivery_of_the_tenant_is_queued_again(storage: TriggerStorage) -> None:
    failed, started = await queue(storage, 2)
    await storage.claim("node-a", now_ms=500, lease_ms=LEASE, limit=10)
    await storage.mark_failed("node-a", failed.trigger_id, failed.webhook_id, "agent_not_found", now_ms=600)
    await storage.mark_started("node-a", started.trigger_id, started.webhook_id, now_ms=600)
    assert await storage.requeue_failed("t2", failed.trigger_id, failed.webhook_id, 700) is None  # another tenant's
    assert await storage.requeue_failed("t1", started.trigger_id, started.webhook_id, 700) is None
    assert await storage.requeue_failed("t1", failed.trigger_id, "no-such-id", 700) is None
    again = await storage.requeue_failed("t1", failed.trigger_id, failed.webhook_id, 700)
    assert again is not None and again == await storage.get_delivery("t1", failed.trigger_id, failed.webhook_id)
    assert (again.status, again.reason, again.attempts, again.next_attempt_ms) == ("queued", None, 0, 700)
    assert again.run_id == failed.run_id and again.received_ms == failed.received_ms  # the same event, the same run id
    assert await storage.requeue_failed("t1", failed.trigger_id, failed.webhook_id, 800) is None  # queued now
    by_status = {
        status: keys(await storage.list_deliveries("t1", failed.trigger_id, DeliveryQuery(10, status=status)))
        for status in ("queued", "started", "failed")
    }
    assert by_status == {"queued": [failed.webhook_id], "started": [started.webhook_id], "failed": []}
    assert [r.webhook_id for r in await storage.claim("node-b", now_ms=700, lease_ms=LEASE, limit=10)] == [
        failed.webhook_id
    ]


async def test_a_freed_place_hurries_the_oldest_postponed_deliveries_of_its_tenant(storage: TriggerStorage) -> None:
    """`hurry`: a run's place freed makes postponed deliveries due now, the tenant's oldest
    first (any tenant's for None); due, leased and finished ones are left alone."""
    ours, theirs = trigger("t1"), trigger("t2")
    rows = [delivery(ours, f"ours_{i}", received_ms=100 + i) for i in range(3)]
    rows.append(delivery(theirs, "theirs", received_ms=50))
    for row in reversed(rows):
        await storage.accept(row)
    claimed = await storage.claim("node-a", now_ms=500, lease_ms=LEASE, limit=10)
    assert keys(claimed) == ["theirs", "ours_0", "ours_1", "ours_2"]
    for row in claimed[:3]:  # postponed far ahead; ours_2 stays leased
        await storage.postpone("node-a", row.trigger_id, row.webhook_id, next_attempt_ms=60_000)

    assert await storage.hurry("t1", 600, 1) == 1
    assert keys(await storage.claim("node-b", now_ms=600, lease_ms=LEASE, limit=10)) == ["ours_0"]
    assert await storage.hurry("t1", 700, 5) == 1  # ours_1; ours_0 (leased to node-b now), ours_2 (leased) stay
    assert await storage.hurry("t1", 700, 5) == 0  # already due
    assert await storage.hurry(None, 800, 5) == 1  # theirs
    again = await storage.claim("node-c", now_ms=800, lease_ms=LEASE, limit=10)
    assert [(r.webhook_id, r.next_attempt_ms) for r in again] == [("theirs", 800), ("ours_1", 700)]
    for row in again:
        await storage.mark_started("node-c", row.trigger_id, row.webhook_id, now_ms=900)
    assert await storage.hurry(None, 900, 5) == 0  # nothing postponed is left


async def test_the_backlog_says_when_its_first_delivery_can_be_claimed(storage: TriggerStorage) -> None:
    """What bounds an idle dispatcher's wait: the earliest `next_attempt_ms`, or the end of a
    lease (claimable at `lease_until_ms + 1`), over the deliveries still queued."""
    assert await storage.backlog() == Backlog(0, None)
    first, second = await queue(storage, 2)
    assert await storage.backlog() == Backlog(2, 0)  # both due at once
    await storage.claim("node-a", now_ms=500, lease_ms=LEASE, limit=10)
    assert await storage.backlog() == Backlog(2, 500 + LEASE + 1)  # both leased until 1500
    await storage.postpone("node-a", first.trigger_id, first.webhook_id, next_attempt_ms=900)
    assert await storage.backlog() == Backlog(2, 900, (first.tenant_id,))
    await storage.mark_started("node-a", first.trigger_id, first.webhook_id, now_ms=950)  # not its lease any more
    await storage.claim("node-b", now_ms=900, lease_ms=LEASE, limit=10)  # takes the postponed one
    assert await storage.backlog() == Backlog(2, 500 + LEASE + 1)
    await storage.mark_started("node-b", first.trigger_id, first.webhook_id, now_ms=950)
    await storage.mark_started("node-a", second.trigger_id, second.webhook_id, now_ms=950)
    assert await storage.backlog() == Backlog(0, None)


async def test_the_backlog_names_the_tenants_whose_deliveries_were_postponed(storage: TriggerStorage) -> None:
    """Tried and put back to wait, by any node: not a delivery never tried, nor one leased now."""
    first, second = await queue(storage, 2)
    assert (await storage.backlog()).postponed_tenants == ()
    await storage.claim("node-a", now_ms=500, lease_ms=LEASE, limit=10)
    assert (await storage.backlog()).postponed_tenants == ()  # leased: being tried
    await storage.postpone("node-a", first.trigger_id, first.webhook_id, next_attempt_ms=900)
    assert (await storage.backlog()).postponed_tenants == (first.tenant_id,)
    await storage.claim("node-b", now_ms=900, lease_ms=LEASE, limit=10)
    await storage.mark_started("node-b", first.trigger_id, first.webhook_id, now_ms=950)
    assert (await storage.backlog()).postponed_tenants == ()


async def test_only_the_lease_owner_postpones(storage: TriggerStorage) -> None:
    (row,) = await queue(storage, 1)
    await storage.claim("node-a", now_ms=500, lease_ms=LEASE, limit=10)
    await storage.postpone("node-b", row.trigger_id, row.webhook_id, next_attempt_ms=999_999)
    await storage.mark_started("node-b", row.trigger_id, row.webhook_id, now_ms=600)
    stored = await storage.get_delivery(row.tenant_id, row.trigger_id, row.webhook_id)
    assert stored is not None and (stored.status, stored.next_attempt_ms) == ("queued", 0)


async def test_prune_deletes_only_old_deliveries_no_longer_queued(storage: TriggerStorage) -> None:
    rows = await queue(storage, 4)  # received at 100..103
    claimed = await storage.claim("node-a", now_ms=500, lease_ms=LEASE, limit=3)
    await storage.mark_started("node-a", claimed[0].trigger_id, claimed[0].webhook_id, now_ms=600)
    await storage.mark_failed("node-a", claimed[1].trigger_id, claimed[1].webhook_id, "gone", now_ms=600)
    await storage.mark_started("node-a", claimed[2].trigger_id, claimed[2].webhook_id, now_ms=600)

    assert await storage.prune(before_ms=102) == 2  # rows 0 and 1; row 2 is newer, row 3 queued
    t, tenant = rows[0].trigger_id, rows[0].tenant_id
    assert keys(await storage.list_deliveries(tenant, t, DeliveryQuery(10))) == keys(rows[:1:-1])
    assert await storage.prune(before_ms=10_000) == 1  # row 2; row 3 is still queued
    assert (await storage.backlog()).queued == 1


async def test_two_owners_claiming_at_once_never_share_a_delivery(storage: TriggerStorage) -> None:
    rows = await queue(storage, 200)
    owners = [f"node-{i}" for i in range(4)]

    async def drain(owner: str) -> list[str]:
        taken: list[str] = []
        while batch := await storage.claim(owner, now_ms=500, lease_ms=LEASE, limit=7):
            taken += keys(batch)
        return taken

    taken = await asyncio.gather(*(drain(o) for o in owners))
    every = [k for part in taken for k in part]
    assert sorted(every) == keys(rows)  # each exactly once
    assert len(set(every)) == len(every)


async def test_nodes_claiming_at_once_never_share_a_delivery(pg_nodes: list[TriggerStorage]) -> None:
    rows = await queue(pg_nodes[0], 300)

    async def drain(node: TriggerStorage, owner: str) -> list[str]:
        taken: list[str] = []
        while batch := await node.claim(owner, now_ms=500, lease_ms=LEASE, limit=5):
            taken += keys(batch)
        return taken

    # two claimers per node: each node's pool serves both at once, three nodes race
    taken = await asyncio.gather(*(drain(n, f"node-{i}-{j}") for i, n in enumerate(pg_nodes) for j in range(2)))
    every = [k for part in taken for k in part]
    assert sorted(every) == keys(rows)
    assert sum(1 for part in taken if part) > 1  # they did share the work
