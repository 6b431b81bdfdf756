"""The event loop never blocks on a request's path: caught by blockbuster, not guessed.

The claim (README, docs/architecture.md): persistence, provider calls and sandboxed commands
never block the event loop. blockbuster wraps the blocking calls of the stdlib (file and socket
I/O, `time.sleep`, the `os` calls that touch the disk, sqlite3) and raises `BlockingError` when
one runs on a thread with a running loop, called from a frame of `agentos`. Here it is on while
a real server (the built-in mock provider in the same loop, the sandbox; SQLite, or a node on
PostgreSQL and Redis) serves
what clients do most: sessions, turns over SSE and WebSocket, a turn superseded by the next
(last-wins), the transcript and events, an agent run that runs commands and waits for a human,
the answer, the run's events, /metrics, /readyz, a session deleted. A blocking call on any of
those paths (a handler, the turn driver, a run's task, the store's adapter, the mock) fails its
request or its run with `internal_error` and logs the `BlockingError`: the test checks both. A second test
does the same for a tenant's key at the other doors: knowledge, the OpenAI door, a signed
webhook, schedules.

Two are allowed, each for a reason: prometheus_client's process collector reading `/proc/self/*`
at /metrics (procfs files are the kernel's memory, read once per scrape, not per turn), and
asyncpg looking for `~/.pgpass` and TLS files as it opens a connection (per new connection, which
the pool keeps, never per query).
Start-up and shutdown (opening files, migrations) are outside the guard: they run before the
server serves and after it stops.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from blockbuster import blockbuster_ctx

from agentos.config import settings_from_dict
from agentos.mock.server import MockServer
from agentos.testing import Event, sse_events, start_server
from agentos.testing.tenants import create_tenant_key
from tests.api.helpers import SSE, new_session
from tests.conftest import REDIS_URL
from tests.triggers.webhooks import Sender, backends, create_trigger

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

ADMIN = "admin-token-of-this-test"


@contextmanager
def loop_guard() -> Iterator[None]:
    with blockbuster_ctx(["agentos"]) as guard:
        for function in guard.functions.values():
            function.can_block_in("prometheus_client/process_collector.py", "collect")  # procfs, per scrape
            # asyncpg looks for ~/.pgpass and the TLS files as it opens a connection: per new
            # connection (the pool keeps them), never per query
            function.can_block_in("asyncpg/connect_utils.py", "_parse_connect_dsn_and_args")
        yield


@pytest.fixture(params=["sqlite", "postgres+redis"])
async def deployment(request: pytest.FixtureRequest, prefix: str) -> AsyncIterator[dict[str, Any]]:
    """The embedded default, or a node of a cluster: a fresh PostgreSQL schema, and Redis under
    this test's prefix."""
    if request.param == "sqlite":
        yield {}
        return
    async for store in backends("postgres"):
        yield store | {"coordination": {"redis_url": REDIS_URL, "key_prefix": prefix}}


def blocked(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What was logged with a BlockingError (a failed request, run or background task)."""
    return [r.getMessage() for r in caplog.records if r.exc_info and "BlockingError" in repr(r.exc_info[1])]


async def test_what_clients_do_most_never_blocks_the_loop(
    tmp_path: Path,
    mock_factory: Any,
    http: aiohttp.ClientSession,
    caplog: pytest.LogCaptureFixture,
    deployment: dict[str, Any],
) -> None:
    # 200 ms to the first token: long enough for a second turn to supersede the first
    mock: MockServer = await mock_factory(scenario="tools", ttft_ms=200, tps=2000, tokens=4)
    settings = settings_from_dict(
        {
            "data_dir": str(tmp_path / "data"),
            "provider": {"url": mock.url, "retry_budget_s": 2.0},
            "agents": {"ops": {"tools": ["run_command", "ask_human"]}},
            **deployment,
        }
    )
    server = await start_server(settings)
    caplog.set_level(logging.ERROR)
    try:
        with loop_guard():
            await turns(http, server.url)
            await a_run(http, server.url)
            for path in ("/metrics", "/readyz"):
                async with http.get(f"{server.url}{path}") as r:
                    assert r.status == 200, (path, await r.text())
    finally:
        await server.close()
    assert blocked(caplog) == []


async def turns(http: aiohttp.ClientSession, url: str) -> None:
    sid = await new_session(http, url)
    first_started = asyncio.Event()
    first = asyncio.create_task(stream_turn(http, f"{url}/v1/sessions/{sid}/turns", "one", first_started))
    await asyncio.wait_for(first_started.wait(), 10)
    second = await stream_turn(http, f"{url}/v1/sessions/{sid}/turns", "two")  # last-wins
    assert [e.name for e in await first][-1] == "turn.cancelled"
    assert second[-1].name == "turn.completed"
    async with http.ws_connect(f"{url}/v1/sessions/{sid}/ws") as ws:
        await ws.send_json({"type": "turn", "input": "three"})
        frames: list[dict[str, Any]] = []
        while not frames or frames[-1]["type"] not in ("turn.completed", "turn.failed"):
            frames.append(await ws.receive_json(timeout=10))
        assert frames[-1]["type"] == "turn.completed", frames
    for listing in ("messages", "events"):
        async with http.get(f"{url}/v1/sessions/{sid}/{listing}") as r:
            assert r.status == 200, await r.text()
            assert (await r.json())["data"], listing
    async with http.delete(f"{url}/v1/sessions/{sid}") as r:
        assert r.status == 204, await r.text()


async def stream_turn(
    http: aiohttp.ClientSession, turns_url: str, text: str, started: asyncio.Event | None = None
) -> list[Event]:
    events = []
    async with http.post(turns_url, json={"input": text}, headers=SSE) as r:
        assert r.status == 200, await r.text()
        async for event in sse_events(r):
            events.append(event)
            if started is not None and event.name == "turn.started":
                started.set()
    return events


async def a_run(http: aiohttp.ClientSession, url: str) -> None:
    async with http.post(f"{url}/v1/agents/ops/runs", json={"input": "go"}) as r:
        assert r.status == 202, await r.text()
        run_id = (await r.json())["run_id"]
    run = await run_status(http, url, run_id, {"waiting_human", "completed", "failed"})
    if run["status"] == "waiting_human":
        answer = {"operation_id": run["pending"]["operation_id"], "answer": "yes"}
        async with http.post(f"{url}/v1/runs/{run_id}/answer", json=answer) as r:
            assert r.status in (200, 202), await r.text()
        run = await run_status(http, url, run_id, {"completed", "failed"})
    assert run["status"] == "completed", run
    async with http.get(f"{url}/v1/runs/{run_id}/events") as r:  # the journal, streamed
        assert r.status == 200, await r.text()
        names = [e.name async for e in sse_events(r)]
    # two sandboxed commands, a human's answer, the end: every step of a run's path was taken
    assert names.count("tool.result") == 2 and "human.answered" in names and names[-1] == "run.completed", names


async def run_status(http: aiohttp.ClientSession, url: str, run_id: str, wanted: set[str]) -> dict[str, Any]:
    run: dict[str, Any] = {}
    for _ in range(500):  # bounded: each look is a request that must not block either
        async with http.get(f"{url}/v1/runs/{run_id}") as r:
            assert r.status == 200, await r.text()
            run = await r.json()
        if run["status"] in wanted:
            return run
        await asyncio.sleep(0.02)
    raise AssertionError(f"run {run_id} never reached {wanted}: {run}")


async def test_the_other_doors_never_block_the_loop(
    tmp_path: Path,
    mock_factory: Any,
    http: aiohttp.ClientSession,
    caplog: pytest.LogCaptureFixture,
    deployment: dict[str, Any],
) -> None:
    """Tenants and keys, knowledge (upload, indexing, query), the OpenAI door, a signed webhook
    that starts a run, a schedule that fires one, the pages and the usage ledger: each with a key
    of a tenant."""
    mock: MockServer = await mock_factory(ttft_ms=5, tps=2000, tokens=4)
    settings = settings_from_dict(
        {
            "data_dir": str(tmp_path / "data"),
            "provider": {"url": mock.url, "retry_budget_s": 2.0},
            "server": {"api_token": ADMIN},
            "agents": {"echo": {"tools": []}},
            "schedules": {"poll_s": 0.05},
            "triggers": {"retry_s": 0.05},
            **deployment,
        }
    )
    server = await start_server(settings)
    caplog.set_level(logging.ERROR)
    try:
        with loop_guard():
            key = await create_tenant_key(server.url, ADMIN, tenant_id="acme")
            await knowledge(http, server.url, key.headers)
            await openai_door(http, server.url, key.headers)
            await webhook_and_schedule(http, server.url, key.headers)
            for path in ("/docs", "/console", "/openapi.json", "/v1/usage"):
                async with http.get(f"{server.url}{path}", headers=key.headers) as r:
                    assert r.status == 200, (path, await r.text())
    finally:
        await server.close()
    assert blocked(caplog) == []


async def knowledge(http: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> None:
    collection = {"name": "notes", "embedding_model": "mock-embed", "dimensions": 8}
    async with http.post(f"{url}/v1/collections", json=collection, headers=headers) as r:
        assert r.status == 201, await r.text()
    document = {"content": "refunds within thirty days", "content_type": "text/plain"}
    async with http.post(f"{url}/v1/collections/notes/documents", json=document, headers=headers) as r:
        assert r.status in (201, 202), await r.text()
        document_id = (await r.json())["document_id"]
    for _ in range(500):  # bounded: indexing runs in the background
        async with http.get(f"{url}/v1/collections/notes/documents/{document_id}", headers=headers) as r:
            state = (await r.json())["status"]
        if state in ("ready", "failed"):
            break
        await asyncio.sleep(0.02)
    assert state == "ready"
    async with http.post(f"{url}/v1/collections/notes/query", json={"query": "refunds"}, headers=headers) as r:
        assert r.status == 200, await r.text()
        assert (await r.json())["results"]


async def openai_door(http: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> None:
    hi = [{"role": "user", "content": "hi"}]
    for stream in (False, True):
        body = {"model": "mock-1", "messages": hi, "stream": stream}
        async with http.post(f"{url}/v1/chat/completions", json=body, headers=headers) as r:
            assert r.status == 200, await r.text()
            await r.read()
    async with http.post(f"{url}/v1/responses", json={"model": "mock-1", "input": "hi"}, headers=headers) as r:
        assert r.status == 200, await r.text()


async def webhook_and_schedule(http: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> None:
    trigger = await create_trigger(http, url, headers)
    sender = Sender(http, url, trigger["trigger_id"], trigger["secret"])
    delivered = await sender.send({"n": 1})
    assert delivered.status == 202, delivered.body
    async with http.post(
        f"{url}/v1/schedules", json={"agent": "echo", "input": "x", "every_s": 1}, headers=headers
    ) as r:
        assert r.status == 201, await r.text()
        schedule_id = (await r.json())["schedule_id"]
    fired = False
    for _ in range(500):  # bounded: the first slot fires within a second
        async with http.get(f"{url}/v1/schedules/{schedule_id}", headers=headers) as r:
            fired = any(f["status"] in ("started", "finished") for f in (await r.json())["last_fires"])
        if fired:
            break
        await asyncio.sleep(0.02)
    assert fired
    cron = {"agent": "echo", "input": "x", "cron": "30 9 * * *", "time_zone": "Asia/Kolkata"}  # a zone read
    async with http.post(f"{url}/v1/schedules", json=cron, headers=headers) as r:
        assert r.status == 201, await r.text()
