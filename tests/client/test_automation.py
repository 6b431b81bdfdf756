"""Triggers and schedules through the client (`AsyncClient`, and `Client` in a thread) against
the real server on loopback: typed answers, the secret shown once, a failed delivery retried,
a schedule's fires, another tenant's trigger a typed 404."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import aiohttp
import pytest

from agentos.client import APIError, AsyncClient, Client, ScheduleOptions
from agentos.mock.server import MockServer
from agentos.testing import RunningServer, eventually
from agentos.testing.tenants import create_tenant_key
from tests.triggers.webhooks import Sender

ADMIN = "admin-token"


async def test_a_trigger_its_deliveries_and_a_failed_one_retried(
    server_factory: Callable[..., Awaitable[RunningServer]], mock: MockServer
) -> None:
    server = await server_factory(mock.url, **{"kernel.max_input_chars": 64})  # a long payload fails its run
    async with AsyncClient(server.url) as client, aiohttp.ClientSession() as http:
        await client.create_agent({"name": "echo", "tools": []})
        trigger = await client.create_trigger("echo", "report: {payload}", "the nightly hook")
        assert trigger.secret and trigger.secret.startswith("whsec_") and trigger.secret not in repr(trigger)
        shown = await client.get_trigger(trigger.trigger_id)
        assert shown.secret is None and shown.description == "the nightly hook"  # never shown again
        assert [t.trigger_id for t in (await client.list_triggers()).data] == [trigger.trigger_id]

        sender = Sender(http, server.url, trigger.trigger_id, trigger.secret)
        assert (await sender.send({"n": 1}, "msg_ok")).status == 202
        assert (await sender.send({"text": "x" * 100}, "msg_long")).status == 202

        async def settled() -> bool:
            page = await client.list_deliveries(trigger.trigger_id)
            return {d.status for d in page.data} == {"started", "failed"}

        await eventually(settled, what="one delivery started, the other failed")
        (failed,) = (await client.list_deliveries(trigger.trigger_id, status="failed")).data
        assert failed.webhook_id == "msg_long" and failed.reason == "invalid_input"
        retried = await client.retry_delivery(trigger.trigger_id, "msg_long")
        assert retried.status == "queued" and retried.run_id == failed.run_id  # its run id kept
        started = await client.get_delivery(trigger.trigger_id, "msg_ok")
        assert started.status == "started" and started.run_id.startswith("run_")
        with pytest.raises(APIError) as again:
            await client.retry_delivery(trigger.trigger_id, "msg_ok")
        assert again.value.status == 409 and again.value.code == "delivery_not_failed"

        rotated = await client.rotate_trigger_secret(trigger.trigger_id)
        assert rotated.secret not in (None, trigger.secret) and len(rotated.secrets) == 2
        assert rotated.secrets[0].expires_ms is None and rotated.secrets[1].expires_ms is not None
        await client.delete_trigger(trigger.trigger_id)
        with pytest.raises(APIError) as gone:
            await client.get_trigger(trigger.trigger_id)
        assert gone.value.status == 404 and gone.value.code == "trigger_not_found"


async def test_another_tenants_trigger_and_schedule_are_typed_404s(
    server_factory: Callable[..., Awaitable[RunningServer]], mock: MockServer
) -> None:
    server = await server_factory(mock.url, **{"server.api_token": ADMIN})
    ours, theirs = [await create_tenant_key(server.url, ADMIN, tenant_id=t) for t in ("ours", "theirs")]
    async with AsyncClient(server.url, token=ours.key) as client:
        await client.create_agent({"name": "echo", "tools": []})
        trigger = await client.create_trigger("echo")
        schedule = await client.create_schedule("echo", "tick", every_s=3600)
    async with AsyncClient(server.url, token=theirs.key) as other:
        for call in (other.get_trigger(trigger.trigger_id), other.get_schedule(schedule.schedule_id)):
            with pytest.raises(APIError) as caught:
                await call
            assert caught.value.status == 404
        assert (await other.list_triggers()).data == [] and (await other.list_schedules()).data == []


def _pause_resume_delete(url: str, schedule_id: str) -> tuple[bool, bool, int]:
    """The blocking client's side: pause, resume, delete; the status of a read after that."""
    with Client(url) as client:
        paused = client.pause_schedule(schedule_id)
        resumed = client.resume_schedule(schedule_id)
        client.delete_schedule(schedule_id)
        with pytest.raises(APIError) as gone:
            client.get_schedule(schedule_id)
        return paused.paused and paused.next_fire_ms is None, not resumed.paused, gone.value.status


async def test_a_schedule_fires_and_is_paused_resumed_and_deleted(server: RunningServer) -> None:
    async with AsyncClient(server.url) as client:
        await client.create_agent({"name": "echo", "tools": []})
        options = ScheduleOptions(overlap="queue", max_runs_in_flight=2, time_zone="Europe/Paris")
        made = await client.create_schedule("echo", "tick", every_s=1, options=options)
        assert made.every_s == 1 and made.time_zone == "Europe/Paris" and made.overlap == "queue"
        assert made.next_fire_ms is not None and made.last_fires == []
        assert [s.schedule_id for s in (await client.list_schedules()).data] == [made.schedule_id]

        async def fired() -> bool:
            fires = (await client.get_schedule(made.schedule_id)).last_fires
            return any(f.status in ("started", "finished") and f.run_id for f in fires)

        await eventually(fired, timeout_s=15, what="the schedule's first fire to start its run")
    paused, resumed, status = await asyncio.to_thread(_pause_resume_delete, server.url, made.schedule_id)
    assert paused and resumed and status == 404
