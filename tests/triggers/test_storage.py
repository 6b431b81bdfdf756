"""The `TriggerStorage` contract, on `triggers.db` and on PostgreSQL: triggers, tenancy, and
accepting deliveries exactly once per (trigger, webhook-id)."""

from __future__ import annotations

import dataclasses

import pytest

from agentos.errors import Conflict
from agentos.triggers.records import DeliveryQuery, SecretRow
from agentos.triggers.storage import TriggerStorage
from tests.triggers.conftest import delivery, trigger


async def test_a_trigger_is_created_read_listed_and_deleted(storage: TriggerStorage) -> None:
    first, second = trigger(created_ms=1), trigger(created_ms=2)
    await storage.create_trigger(first, max_per_tenant=10)
    await storage.create_trigger(second, max_per_tenant=10)

    assert await storage.get_trigger("t1", first.trigger_id) == first
    assert await storage.find_trigger(second.trigger_id) == second
    assert await storage.list_triggers("t1") == [first, second]

    assert await storage.delete_trigger("t1", first.trigger_id) is True
    assert await storage.get_trigger("t1", first.trigger_id) is None
    assert await storage.find_trigger(first.trigger_id) is None
    assert await storage.delete_trigger("t1", first.trigger_id) is False
    assert await storage.list_triggers("t1") == [second]


async def test_a_disabled_trigger_and_its_secrets_read_back_unchanged(storage: TriggerStorage) -> None:
    t = dataclasses.replace(
        trigger(), enabled=False, secrets=(SecretRow("ab" * 32, 5, None), SecretRow("cd" * 32, 1, 99))
    )
    await storage.create_trigger(t, max_per_tenant=10)
    assert await storage.find_trigger(t.trigger_id) == t


async def test_another_tenants_trigger_is_invisible(storage: TriggerStorage) -> None:
    t = trigger("t1")
    await storage.create_trigger(t, max_per_tenant=10)

    assert await storage.get_trigger("t2", t.trigger_id) is None
    assert await storage.list_triggers("t2") == []
    assert await storage.delete_trigger("t2", t.trigger_id) is False
    assert await storage.set_secrets("t2", t.trigger_id, [SecretRow("ee" * 32, 7)]) is False
    assert await storage.get_trigger("t1", t.trigger_id) == t  # untouched


async def test_a_tenant_has_at_most_max_per_tenant_triggers(storage: TriggerStorage) -> None:
    for _ in range(3):
        await storage.create_trigger(trigger("t1"), max_per_tenant=3)
    with pytest.raises(Conflict) as refused:
        await storage.create_trigger(trigger("t1"), max_per_tenant=3)
    assert refused.value.code == "too_many_triggers"
    await storage.create_trigger(trigger("t2"), max_per_tenant=3)  # another tenant's count
    assert len(await storage.list_triggers("t1")) == 3


async def test_a_taken_trigger_id_is_a_conflict(storage: TriggerStorage) -> None:
    t = trigger()
    await storage.create_trigger(t, max_per_tenant=10)
    with pytest.raises(Conflict) as refused:
        await storage.create_trigger(dataclasses.replace(t, tenant_id="t2"), max_per_tenant=10)
    assert refused.value.code == "trigger_exists"


async def test_set_secrets_replaces_them(storage: TriggerStorage) -> None:
    t = trigger()
    await storage.create_trigger(t, max_per_tenant=10)
    rotated = [SecretRow("11" * 32, 50), dataclasses.replace(t.secrets[0], expires_ms=90)]
    assert await storage.set_secrets("t1", t.trigger_id, rotated) is True
    stored = await storage.get_trigger("t1", t.trigger_id)
    assert stored is not None and stored.secrets == tuple(rotated)
    assert await storage.set_secrets("t1", "trg_missing", rotated) is False


async def test_a_redelivery_returns_the_stored_row_and_writes_nothing(storage: TriggerStorage) -> None:
    t = trigger()
    await storage.create_trigger(t, max_per_tenant=10)
    first = delivery(t, "msg_1", body=b'{"a": 1}')
    assert await storage.accept(first) == (first, True)

    again = delivery(t, "msg_1", received_ms=9999, body=b'{"a": 2}')  # a retry: new run id chosen, new body
    stored, new = await storage.accept(again)
    assert new is False
    assert stored == first  # the first run id is answered again
    assert await storage.get_delivery("t1", t.trigger_id, "msg_1") == first
    assert (await storage.backlog()).queued == 1


async def test_the_same_webhook_id_on_another_trigger_is_another_delivery(storage: TriggerStorage) -> None:
    a, b = trigger(), trigger()
    assert (await storage.accept(delivery(a, "msg_1")))[1] is True
    assert (await storage.accept(delivery(b, "msg_1")))[1] is True
    assert (await storage.backlog()).queued == 2


async def test_deliveries_are_listed_newest_first_in_pages_and_per_tenant(storage: TriggerStorage) -> None:
    t = trigger()
    await storage.create_trigger(t, max_per_tenant=10)
    rows = [delivery(t, f"msg_{i}", received_ms=1000 + i) for i in range(5)]
    for row in rows:
        await storage.accept(row)
    await storage.accept(delivery(trigger(), "msg_other"))  # another trigger's

    page = await storage.list_deliveries("t1", t.trigger_id, DeliveryQuery(3))
    assert page == rows[:1:-1]
    rest = await storage.list_deliveries("t1", t.trigger_id, DeliveryQuery(3, page[-1].received_ms))
    assert rest == rows[1::-1]
    assert await storage.list_deliveries("t2", t.trigger_id, DeliveryQuery(10)) == []
    assert await storage.get_delivery("t2", t.trigger_id, "msg_0") is None


async def test_deliveries_outlive_their_deleted_trigger(storage: TriggerStorage) -> None:
    t = trigger()
    await storage.create_trigger(t, max_per_tenant=10)
    row = delivery(t, "msg_1")
    await storage.accept(row)
    assert await storage.delete_trigger("t1", t.trigger_id) is True
    assert await storage.get_delivery("t1", t.trigger_id, "msg_1") == row
    assert await storage.accept(delivery(t, "msg_1")) == (row, False)  # still deduplicated
