"""Triggers over real HTTP: the real server (SQLite files, or PostgreSQL), the real mock
provider; a sender that signs each delivery."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agentos.mock.server import MockServer
from agentos.testing import RunningServer, eventually
from agentos.testing.tenants import TenantKey, create_tenant_key
from tests.api.helpers import assert_documented, expect_error
from tests.triggers.webhooks import (
    Answer,
    Sender,
    backend,  # noqa: F401  (the fixture: both store backends)
    create_trigger,
    deliveries,
    metric,
    run_outcome,
    serve,
)

ADMIN = "admin-token"


@pytest.fixture
async def server(tmp_path: Path, mock: MockServer, backend: dict[str, Any]) -> AsyncIterator[RunningServer]:  # noqa: F811
    running = await serve(tmp_path / "data", mock, backend)
    yield running
    await running.close()


@dataclass
class TwoTenants:
    server: RunningServer
    alice: TenantKey
    bob: TenantKey


@pytest.fixture
async def tenants(tmp_path: Path, mock: MockServer) -> AsyncIterator[TwoTenants]:
    """A server with an admin token, and a key of each of two tenants."""
    server = await serve(tmp_path / "data", mock, {}, server={"api_token": ADMIN})
    try:
        alice = await create_tenant_key(server.url, ADMIN, tenant_id="alice")
        yield TwoTenants(server, alice, await create_tenant_key(server.url, ADMIN, tenant_id="bob"))
    finally:
        await server.close()


async def test_a_trigger_shows_its_secret_once_and_a_delivery_starts_a_run(
    server: RunningServer, mock: MockServer, http: aiohttp.ClientSession
) -> None:
    url = server.url
    created = await create_trigger(http, url, input_template="ticket: {payload.title}", description="support")
    trigger_id = created["trigger_id"]
    assert created["events_url"] == f"/v1/triggers/{trigger_id}/events"
    async with http.get(f"{url}/v1/triggers/{trigger_id}") as r:
        shown = await r.json()
    assert "secret" not in shown and shown["agent"] == "echo" and shown["input_template"] == "ticket: {payload.title}"
    async with http.get(f"{url}/v1/triggers") as r:
        listed = (await r.json())["data"]
    assert [t["trigger_id"] for t in listed] == [trigger_id] and "secret" not in listed[0]

    answer = await Sender(http, url, trigger_id, created["secret"]).send({"title": "disk full"}, "msg_1")
    assert answer.status == 202
    assert answer.body == {
        "webhook_id": "msg_1",
        "run_id": answer.body["run_id"],
        "status": "queued",
        "duplicate": False,
    }
    run_id = answer.body["run_id"]
    assert await run_outcome(http, url, run_id) == "run.completed"
    row = await server.services.runs.store.load_run("default", run_id)  # the journal: what the run was given
    assert row is not None and row.agent == "echo" and row.input == "ticket: disk full"

    async def started() -> bool:
        async with http.get(f"{url}/v1/triggers/{trigger_id}/deliveries/msg_1") as r:
            return bool((await r.json())["status"] == "started")

    await eventually(started, what="the delivery to be marked started")
    assert mock.stats.requests == 1
    # every answer as the document says (tests/api/test_openapi.py checks the other routes)
    assert_documented(created, "TriggerCreated")
    assert_documented(shown, "Trigger")
    assert_documented(answer.body, "DeliveryAccepted")
    async with http.get(f"{url}/v1/triggers/{trigger_id}/deliveries?limit=1") as r:
        page = await r.json()
    assert_documented(page, "DeliveryPage")
    assert_documented(page["data"][0], "Delivery")
    async with http.get(f"{url}/v1/triggers?limit=1") as r:
        assert_documented(await r.json(), "TriggerPage")
    async with http.post(f"{url}/v1/triggers/{trigger_id}/rotate") as r:
        assert_documented(await r.json(), "TriggerCreated")


async def test_a_redelivery_answers_the_same_run_and_starts_nothing(
    server: RunningServer, mock: MockServer, http: aiohttp.ClientSession
) -> None:
    created = await create_trigger(http, server.url)
    sender = Sender(http, server.url, created["trigger_id"], created["secret"])
    first = await sender.send({"a": 1}, "evt-42", ts=int(time.time()) - 60)
    assert first.status == 202
    assert await run_outcome(http, server.url, first.body["run_id"]) == "run.completed"
    again = await sender.send({"a": 1}, "evt-42")  # the sender's retry: signed again, a new timestamp
    assert again.status == 200
    assert again.body["run_id"] == first.body["run_id"] and again.body["duplicate"] is True
    other = await sender.send({"a": 2}, "evt-43")  # a new event after it: the dispatcher has run since
    assert await run_outcome(http, server.url, other.body["run_id"]) == "run.completed"
    assert mock.stats.requests == 2  # two runs, not three
    found = await deliveries(http, server.url, created["trigger_id"])
    assert sorted(d["webhook_id"] for d in found) == ["evt-42", "evt-43"]


async def test_refused_deliveries_answer_json_errors_and_store_nothing(
    server: RunningServer, mock: MockServer, http: aiohttp.ClientSession
) -> None:
    url = server.url
    created = await create_trigger(http, url)
    trigger_id = created["trigger_id"]
    sender = Sender(http, url, trigger_id, created["secret"])
    other_secret = (await create_trigger(http, url))["secret"]
    replay = int(time.time()) - 3600
    cases: list[tuple[Callable[[], Awaitable[Answer]], int, str]] = [
        (lambda: sender.send(ts=replay), 401, "timestamp_out_of_tolerance"),  # a captured delivery, replayed
        (lambda: sender.send(ts=int(time.time()) + 3600), 401, "timestamp_out_of_tolerance"),
        (lambda: sender.send(secret=other_secret), 401, "invalid_signature"),
        (lambda: sender.send(headers={"webhook-signature": "v1,AAAA garbage"}), 401, "invalid_signature"),
        (lambda: sender.send(headers={"webhook-signature": ""}), 401, "missing_signature"),
        (lambda: sender.send(raw=b"x" * ((1 << 20) + 1)), 413, "payload_too_large"),  # by its Content-Length
        (lambda: sender.send(raw=b"x" * ((1 << 20) + 1), chunked=True), 413, "payload_too_large"),  # as it is read
        (lambda: sender.send(raw=b"{not json"), 400, "malformed_json"),
        (lambda: sender.send(raw=b"\xff\xfe"), 400, "malformed_json"),
        (lambda: sender.send(raw=b"[" * 100_000), 400, "malformed_json"),  # deeper than the decoder goes
        (lambda: sender.send(webhook_id="has space"), 400, "invalid_webhook_id"),
        (lambda: sender.send(webhook_id="x" * 257), 400, "invalid_webhook_id"),
    ]
    for send, status, code in cases:
        answer = await send()
        assert answer.status == status and answer.body["error"]["code"] == code, answer
        assert set(answer.body["error"]) == {"code", "message"}
        assert "garbage" not in answer.body["error"]["message"]
    async with http.post(f"{url}/v1/triggers/trg_00000000000000000000/events", data=b"{}") as r:
        await expect_error(r, 404, "trigger_not_found")
    assert await deliveries(http, url, trigger_id) == []
    async with http.get(f"{url}/metrics") as r:
        text = await r.text()
    assert metric(text, 'agentos_trigger_deliveries_total{outcome="rejected"}') == len(cases) + 1
    assert mock.stats.requests == 0


async def test_a_deleted_trigger_answers_404_like_an_unknown_one(
    server: RunningServer, http: aiohttp.ClientSession
) -> None:
    created = await create_trigger(http, server.url)
    async with http.delete(f"{server.url}/v1/triggers/{created['trigger_id']}") as r:
        assert r.status == 204
    answer = await Sender(http, server.url, created["trigger_id"], created["secret"]).send()
    assert answer.status == 404 and answer.body["error"]["code"] == "trigger_not_found"


async def test_an_agent_the_tenant_cannot_run_is_404(server: RunningServer, http: aiohttp.ClientSession) -> None:
    async with http.post(f"{server.url}/v1/triggers", json={"agent": "nobody"}) as r:
        await expect_error(r, 404, "agent_not_found")
    async with http.post(
        f"{server.url}/v1/triggers", data=b"[" * 100_000, headers={"Content-Type": "application/json"}
    ) as r:  # deeper than msgspec goes
        await expect_error(r, 400, "malformed_json")
    async with http.post(f"{server.url}/v1/triggers", json={"agent": "echo", "extra": 1}) as r:
        await expect_error(r, 422, "invalid_input")
    async with http.post(f"{server.url}/v1/triggers", json={"agent": "echo", "input_template": "x" * 9000}) as r:
        await expect_error(r, 422, "invalid_input")


async def test_another_tenant_cannot_see_rotate_or_delete_a_trigger(
    tenants: TwoTenants, http: aiohttp.ClientSession
) -> None:
    server, alice, bob = tenants.server, tenants.alice, tenants.bob
    created = await create_trigger(http, server.url, alice.headers)
    trigger_id = created["trigger_id"]
    sent = await Sender(http, server.url, trigger_id, created["secret"]).send(webhook_id="w1")
    assert sent.status == 202
    base = f"{server.url}/v1/triggers/{trigger_id}"
    for method, path in [
        ("GET", ""),
        ("POST", "/rotate"),
        ("DELETE", ""),
        ("GET", "/deliveries"),
        ("GET", "/deliveries/w1"),
        ("POST", "/deliveries/w1/retry"),
    ]:
        async with http.request(method, base + path, headers=bob.headers) as r:
            await expect_error(r, 404, "trigger_not_found")
    async with http.get(f"{server.url}/v1/triggers", headers=bob.headers) as r:
        assert (await r.json())["data"] == []
    async with http.get(f"{server.url}/v1/runs/{sent.body['run_id']}", headers=bob.headers) as r:
        await expect_error(r, 404)
    assert await run_outcome(http, server.url, sent.body["run_id"], alice.headers) == "run.completed"
    reader = await create_tenant_key(server.url, ADMIN, tenant_id="alice", scopes=["triggers:read"])
    async with http.post(f"{server.url}/v1/triggers", json={"agent": "echo"}, headers=reader.headers) as r:
        await expect_error(r, 403, "insufficient_scope")


@pytest.mark.parametrize("overlap_s", [0, 3600])
async def test_a_rotated_secret_stays_valid_for_the_overlap(
    tmp_path: Path, mock: MockServer, http: aiohttp.ClientSession, overlap_s: int
) -> None:
    server = await serve(tmp_path / "data", mock, {}, triggers={"rotation_overlap_s": overlap_s})
    try:
        created = await create_trigger(http, server.url)
        async with http.post(f"{server.url}/v1/triggers/{created['trigger_id']}/rotate") as r:
            assert r.status == 200
            rotated = await r.json()
        assert rotated["secret"] != created["secret"]
        assert [s["expires_ms"] is None for s in rotated["secrets"]] == [True] + [False] * (overlap_s > 0)
        sender = Sender(http, server.url, created["trigger_id"], rotated["secret"])
        assert (await sender.send()).status == 202
        old = await sender.send(secret=created["secret"])
        assert old.status == (202 if overlap_s else 401)
    finally:
        await server.close()


async def test_over_the_tenants_active_runs_a_burst_waits_and_every_delivery_runs(
    tmp_path: Path, mock_factory: Any, http: aiohttp.ClientSession
) -> None:
    mock: MockServer = await mock_factory(ttft_ms=100, tokens=2)
    server = await serve(tmp_path / "data", mock, {}, tenant_limits={"max_active_runs": 1})
    try:
        created = await create_trigger(http, server.url)
        sender = Sender(http, server.url, created["trigger_id"], created["secret"])
        answers = [await sender.send({"i": i}) for i in range(8)]
        assert {a.status for a in answers} == {202}

        async def backlog() -> float:
            async with http.get(f"{server.url}/metrics") as r:
                return metric(await r.text(), "agentos_trigger_backlog")

        await eventually(lambda: _positive(backlog()), what="a backlog in /metrics")
        await mock.stats.wait_for(lambda s: s.completed == 8, timeout_s=30, what="every delivery's run")
        assert mock.stats.max_concurrent == 1  # one at a time: the tenant's cap held
        outcomes = {await run_outcome(http, server.url, a.body["run_id"]) for a in answers}
        assert outcomes == {"run.completed"}
        async with http.get(f"{server.url}/metrics") as r:
            text = await r.text()
        assert metric(text, "agentos_trigger_runs_postponed_total") > 0
        assert metric(text, "agentos_trigger_runs_started_total") == 8
        assert metric(text, "agentos_trigger_runs_failed_total") == 0
    finally:
        await server.close()


async def _positive(value: Any) -> bool:
    return bool(await value > 0)


async def test_a_failed_delivery_is_retried_by_its_tenant_only_and_a_started_one_is_409(
    tenants: TwoTenants, http: aiohttp.ClientSession
) -> None:
    server, alice, bob = tenants.server, tenants.alice, tenants.bob
    empty = await create_trigger(http, server.url, alice.headers, input_template="{payload.missing}")
    fine = await create_trigger(http, server.url, alice.headers)
    base = f"{server.url}/v1/triggers/{empty['trigger_id']}/deliveries/w1"
    assert (await Sender(http, server.url, empty["trigger_id"], empty["secret"]).send(webhook_id="w1")).status == 202
    ran = await Sender(http, server.url, fine["trigger_id"], fine["secret"]).send(webhook_id="w2")

    async def failed() -> bool:
        async with http.get(base, headers=alice.headers) as r:
            return bool((await r.json())["status"] == "failed")

    await eventually(failed, what="the delivery to fail (its input renders empty)")
    async with http.get(f"{base[:-3]}?status=failed", headers=alice.headers) as r:
        assert [d["webhook_id"] for d in (await r.json())["data"]] == ["w1"]
    async with http.get(f"{base[:-3]}?status=started", headers=alice.headers) as r:
        assert (await r.json())["data"] == []
    async with http.get(f"{base[:-3]}?status=lost", headers=alice.headers) as r:
        await expect_error(r, 422, "invalid_input")
    async with http.post(f"{base}/retry", headers=bob.headers) as r:
        await expect_error(r, 404, "trigger_not_found")  # another tenant's
    reader = await create_tenant_key(server.url, ADMIN, tenant_id="alice", scopes=["triggers:read"])
    async with http.post(f"{base}/retry", headers=reader.headers) as r:
        await expect_error(r, 403, "insufficient_scope")
    async with http.post(f"{base[:-2]}nope/retry", headers=alice.headers) as r:
        await expect_error(r, 404, "delivery_not_found")
    async with http.post(f"{base}/retry", headers=alice.headers) as r:
        assert r.status == 202, await r.text()
        retried = await r.json()
    assert_documented(retried, "Delivery")
    assert (retried["status"], retried["reason"], retried["attempts"]) == ("queued", None, 0)
    await eventually(failed, what="the retried delivery to fail again (nothing was fixed)")
    assert await run_outcome(http, server.url, ran.body["run_id"], alice.headers) == "run.completed"

    async def started() -> bool:
        async with http.get(f"{server.url}/v1/triggers/{fine['trigger_id']}/deliveries/w2", headers=alice.headers) as r:
            return bool((await r.json())["status"] == "started")

    await eventually(started, what="the other delivery to be marked started")
    async with http.post(
        f"{server.url}/v1/triggers/{fine['trigger_id']}/deliveries/w2/retry", headers=alice.headers
    ) as r:
        await expect_error(r, 409, "delivery_not_failed")
