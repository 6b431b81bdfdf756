"""Retention (`agentos.runtime.retention`) on a real server, SQLite and PostgreSQL: what outlived
its tenant's `retention_s` is deleted, what is newer stays, a tenant's override wins over the
server's default, a session whose turn runs is skipped, deletions go in bounded batches.

Time: the server's wall clock is a FakeClock started at the real time; rows stamped in the past
are written through the store itself (as old rows a previous process left), and a sweep is run
by the test (`retention.sweep()`), never by waiting for the interval.
"""

from __future__ import annotations

import time
from typing import Any

import aiohttp

from agentos.journal.journal import RunRow
from agentos.mock.server import MockServer
from agentos.runtime.retention import Retention
from agentos.store.ledger import UsageRow
from agentos.store.records import AccessRecord, MessageRecord, SessionRecord
from agentos.testing import FakeClock, RunningServer, sse_events
from agentos.testing.tenants import create_tenant_key
from tests.api.helpers import SSE
from tests.knowledge import conftest as knowledge

backend = knowledge.backend  # the fixture: each store backend, as dotted settings

DAY_S = 86_400
ADMIN = "admin-token-for-retention"
AUTH = {"Authorization": f"Bearer {ADMIN}"}  # the server's token: tenant "default"


async def start(
    server_factory, mock: MockServer, backend: dict[str, Any], **more: Any
) -> tuple[RunningServer, FakeClock]:
    wall = FakeClock(time.time())
    settings = {"server.api_token": ADMIN, "tenant_limits.retention_s": DAY_S, **backend, **more}
    return await server_factory(mock.url, wall_clock=wall, **settings), wall


# Each test asks for `backend` first: its PostgreSQL schema is then dropped after the server has
# closed (fixtures end in the reverse order of their start), never under a running sweep.


def retention_of(server: RunningServer) -> Retention:
    retention = server.services.retention
    assert retention is not None
    return retention


async def old_session(server: RunningServer, tenant_id: str, session_id: str, at_ms: int, *, last_ms: int = 0) -> None:
    """A session (with one message) created at `at_ms`, its last message at `last_ms` (or `at_ms`)."""
    store = server.runtime.store
    await store.create_session(SessionRecord(session_id=session_id, tenant_id=tenant_id, created_at_ms=at_ms))
    message = MessageRecord(
        tenant_id=tenant_id,
        session_id=session_id,
        turn_id=f"t-{session_id}",
        role="user",
        content="old words",
        created_at_ms=last_ms or at_ms,
    )
    await store.commit_message(message)


def old_rows(server: RunningServer, tenant_id: str, at_ms: int, count: int = 1) -> None:
    """`count` access rows and usage rows of the tenant at `at_ms` (queued: reads come after them)."""
    for _ in range(count):
        server.runtime.store.log_access(
            AccessRecord(
                ts_ms=at_ms, method="GET", path="/old", status=200, duration_ms=1.0, remote="", tenant_id=tenant_id
            )
        )
        server.runtime.store.record_usage(UsageRow(tenant_id=tenant_id, model="m", target="t", at_ms=at_ms))


async def counts(server: RunningServer, tenant_id: str) -> tuple[int, int]:
    """(access rows at /old, usage rows) of the tenant, after every row queued before."""
    store: Any = server.runtime.store
    access = "SELECT count(*) FROM access_log WHERE path = '/old' AND tenant_id = "
    usage = "SELECT count(*) FROM usage_ledger WHERE tenant_id = "
    if hasattr(store, "_access"):  # SQLite: each file through its own writer
        a = await store._access.read(lambda c: c.execute(access + "?", (tenant_id,)).fetchone()[0])
        u = await store._ledger.read(lambda c: c.execute(usage + "?", (tenant_id,)).fetchone()[0])
        return a, u
    a = (await store._fetch(store._lanes[2], access + "$1", tenant_id))[0][0]
    u = (await store._fetch(store._lanes[3], usage + "$1", tenant_id))[0][0]
    return int(a), int(u)


async def metric(http: aiohttp.ClientSession, server: RunningServer, line: str) -> float:
    async with http.get(f"{server.url}/metrics", headers=AUTH) as r:
        text = await r.text()
    found = [row for row in text.splitlines() if row.startswith(line + " ")]
    assert found, f"{line} not in /metrics"
    return float(found[0].split()[-1])


async def test_older_than_the_retention_is_deleted_newer_kept_and_a_tenant_override_wins(
    backend: dict[str, Any], server_factory, mock: MockServer, http: aiohttp.ClientSession
) -> None:
    server, wall = await start(server_factory, mock, backend)
    await create_tenant_key(server.url, ADMIN, tenant_id="keeper", limits={"retention_s": 3 * DAY_S})
    now_ms = int(wall.now() * 1000)
    two_days_ago = now_ms - 2 * DAY_S * 1000
    for tenant in ("default", "keeper"):
        await old_session(server, tenant, f"ses_old_{tenant}", two_days_ago)
        old_rows(server, tenant, two_days_ago)
    await old_session(server, "default", "ses_revived", two_days_ago, last_ms=now_ms)  # old, but active today
    async with http.post(f"{server.url}/v1/sessions", json={}, headers=AUTH) as r:
        fresh = (await r.json())["id"]  # in memory too
    store = server.runtime.store

    await retention_of(server).sweep()

    assert await store.get_session("default", "ses_old_default") is None
    assert await store.get_session("keeper", "ses_old_keeper") is not None  # 3 days beat the default's 1
    assert await store.get_session("default", "ses_revived") is not None
    assert await store.get_session("default", fresh) is not None
    assert await counts(server, "default") == (0, 0)
    assert await counts(server, "keeper") == (1, 1)
    for kind in ("sessions", "access", "usage"):
        assert await metric(http, server, f'agentos_retention_deleted_rows_total{{kind="{kind}"}}') == 1.0

    wall.advance(2 * DAY_S)  # the keeper's old rows are 4 days old now, the fresh session 2
    await retention_of(server).sweep()

    assert await store.get_session("keeper", "ses_old_keeper") is None
    assert await counts(server, "keeper") == (0, 0)
    assert await store.get_session("default", fresh) is None
    assert not server.runtime.kernel.has_session(fresh)  # its in-memory state went with it
    async with http.get(f"{server.url}/v1/sessions/{fresh}", headers=AUTH) as r:
        assert r.status == 404


async def test_a_session_whose_turn_runs_is_skipped_until_it_ends(
    backend: dict[str, Any], server_factory, mock: MockServer, http: aiohttp.ClientSession
) -> None:
    server, wall = await start(server_factory, mock, backend)
    async with http.post(f"{server.url}/v1/sessions", json={}, headers=AUTH) as r:
        session_id = (await r.json())["id"]
    mock.set_faults(hang_rate=1.0)  # the turn waits for its answer until cancelled
    body = {"input": "hold on"}
    async with http.post(f"{server.url}/v1/sessions/{session_id}/turns", json=body, headers=SSE | AUTH) as turn:
        events = sse_events(turn)
        assert (await anext(events)).name == "turn.started"
        wall.advance(2 * DAY_S)  # everything it wrote is older than the retention now
        await retention_of(server).sweep()
        assert retention_of(server).statistics().skipped_active_total == 1
        assert await server.runtime.store.get_session("default", session_id) is not None
        assert server.runtime.kernel.active_turn(session_id) is not None
        async with http.delete(f"{server.url}/v1/sessions/{session_id}/turn", headers=AUTH) as r:
            assert r.status in (200, 202, 204), await r.text()
        assert [e.name async for e in events][-1] == "turn.cancelled"
    mock.set_faults(hang_rate=0.0)
    await retention_of(server).sweep()
    assert await server.runtime.store.get_session("default", session_id) is None


async def test_deletions_go_in_batches_of_batch_rows(
    backend: dict[str, Any], server_factory, mock: MockServer, http: aiohttp.ClientSession
) -> None:
    server, wall = await start(server_factory, mock, backend, **{"retention.batch_rows": 10})
    long_ago = int(wall.now() * 1000) - 2 * DAY_S * 1000
    old_rows(server, "default", long_ago, count=25)
    store = server.runtime.store
    await counts(server, "default")  # every row committed
    cutoff = long_ago + 1
    assert await store.expire_access("default", cutoff, limit=10) == 10  # one batch: no more
    assert await store.expire_usage("default", cutoff, limit=10) == 10
    assert await counts(server, "default") == (15, 15)
    before = retention_of(server).statistics().batches_total
    await retention_of(server).sweep()
    assert await counts(server, "default") == (0, 0)
    stats = retention_of(server).statistics()
    assert stats.deleted["access"] == stats.deleted["usage"] == 15
    # access: 10, 5; usage: 10, 5; runs: one empty batch; no session
    assert stats.batches_total - before == 5


def old_run(
    run_id: str, spec_ref: str, status: str, at_ms: int, *, session_id: str | None = None, parent: str | None = None
) -> RunRow:
    """A run of the default tenant's `helper` agent, last changed at `at_ms`."""
    return RunRow(
        run_id=run_id,
        tenant_id="default",
        agent="helper",
        session_id=session_id,
        parent_run_id=parent,
        depth=int(parent is not None),
        spec_ref=spec_ref,
        input="in",
        status=status,
        result=None,
        reason=None,
        created_ms=at_ms,
        updated_ms=at_ms,
    )


async def test_a_session_with_an_unfinished_run_is_kept(
    backend: dict[str, Any], server_factory, mock: MockServer
) -> None:
    """A run waiting for a human outlives its session's retention: deleting the session would
    terminate it. Its finished sibling session goes."""
    server, wall = await start(server_factory, mock, backend)
    journal_store = server.services.runs.store
    journal = journal_store.journal
    long_ago = int(wall.now() * 1000) - 2 * DAY_S * 1000
    for session_id, status in (("ses_waits", "waiting"), ("ses_done", "completed")):
        await old_session(server, "default", session_id, long_ago)
        spec_ref, put_spec = journal.payload("default", {"name": "helper"})
        row = old_run(f"run_{session_id}", spec_ref, status, long_ago, session_id=session_id)
        await journal_store.write([put_spec, journal.insert_run(row)])

    await retention_of(server).sweep()

    assert await server.runtime.store.get_session("default", "ses_waits") is not None
    assert await journal_store.load_run("default", "run_ses_waits") is not None
    assert await server.runtime.store.get_session("default", "ses_done") is None
    assert await journal_store.load_run("default", "run_ses_done") is None  # went with its session
    assert retention_of(server).statistics().skipped_active_total == 1


async def test_finished_runs_outside_sessions_expire_and_working_ones_stay(
    backend: dict[str, Any], server_factory, mock: MockServer
) -> None:
    server, wall = await start(server_factory, mock, backend)
    journal_store = server.services.runs.store
    journal = journal_store.journal
    long_ago = int(wall.now() * 1000) - 2 * DAY_S * 1000
    for run_id, status in (("run_done", "completed"), ("run_done.1", "completed"), ("run_waiting", "waiting")):
        spec_ref, put_spec = journal.payload("default", {"name": "helper"})
        parent = "run_done" if run_id == "run_done.1" else None
        row = old_run(run_id, spec_ref, status, long_ago, parent=parent)
        await journal_store.write([put_spec, journal.insert_run(row)])

    await retention_of(server).sweep()

    assert await journal_store.load_run("default", "run_done") is None
    assert await journal_store.load_run("default", "run_done.1") is None  # a child goes with its run
    assert await journal_store.load_run("default", "run_waiting") is not None
    assert retention_of(server).statistics().deleted["runs"] == 2


async def test_the_server_sweeps_every_interval_by_itself(
    backend: dict[str, Any], server_factory, mock: MockServer
) -> None:
    server, wall = await start(server_factory, mock, backend, **{"retention.interval_s": 0.01})
    await old_session(server, "default", "ses_old", int(wall.now() * 1000) - 2 * DAY_S * 1000)
    assert await retention_of(server).wait_swept(5.0)  # one that may have begun before the session
    assert await retention_of(server).wait_swept(5.0)  # one that began after it
    assert await server.runtime.store.get_session("default", "ses_old") is None
