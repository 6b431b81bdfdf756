"""kill -9 right after the 2xx: a real `agentos serve` process. A 2xx promised the run; after a
restart every delivery's run exists exactly once and completes."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from agentos.config import StoreConfig
from agentos.mock.server import MockServer
from tests.e2e.test_process import agentos_process
from tests.postgres import fresh_schema
from tests.triggers.webhooks import Sender, create_trigger, run_outcome

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

DELIVERIES = 20


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[StoreConfig | None]:
    if request.param == "sqlite":
        yield None
        return
    async for config in fresh_schema():
        yield config


async def test_deliveries_answered_before_a_kill_9_each_run_once_after_the_restart(
    tmp_path: Path, mock_factory, http: aiohttp.ClientSession, store: StoreConfig | None
) -> None:
    mock: MockServer = await mock_factory(ttft_ms=300, tokens=2)
    config = tmp_path / "agentos.toml"
    # two runs at a time: at the kill most deliveries are still queued, two runs are mid-answer
    limits = "[tenant_limits]\nmax_active_runs = 2\n[triggers]\nretry_s = 0.05\n"
    config.write_text("[agents.echo]\ntools = []\n" + limits + _store_toml(store))
    data = tmp_path / "data"
    flags = ("--config", str(config), "--data-dir", str(data), "--provider-url", mock.url)
    async with agentos_process(*flags) as (proc, url):
        created = await create_trigger(http, url)
        sender = Sender(http, url, created["trigger_id"], created["secret"])
        answers = await asyncio.gather(*(sender.send({"i": i}, f"evt-{i}") for i in range(DELIVERIES)))
        proc.send_signal(signal.SIGKILL)  # at once: runs not finished, some deliveries not yet dispatched
        await proc.wait()
    assert {a.status for a in answers} == {202}
    run_ids = {a.body["run_id"] for a in answers}
    assert len(run_ids) == DELIVERIES
    assert mock.stats.completed < DELIVERIES  # the kill did interrupt work
    async with agentos_process(*flags) as (proc, url):
        # On PostgreSQL the restarted server is a new lease owner: the killed one's claims come
        # back when their 10 s lease ends (the dispatcher looks again then); then 20 runs go two
        # at a time.
        outcomes = await asyncio.gather(*(run_outcome(http, url, r, start_timeout_s=60) for r in run_ids))
        assert set(outcomes) == {"run.completed"}
        sender.url = url
        again = await sender.send({"i": 0}, "evt-0")  # the sender retries one it did not see answered
        assert again.status == 200 and again.body["run_id"] == answers[0].body["run_id"]
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    stored = await _runs(data, store)
    assert sorted(stored) == sorted((run_id, "completed") for run_id in run_ids)  # each once, no other run


def _store_toml(store: StoreConfig | None) -> str:
    if store is None:
        return ""
    return (
        f'[store]\nbackend = "postgres"\npostgres_url = "{store.postgres_url}"\n'
        f'postgres_schema = "{store.postgres_schema}"\n'
    )


async def _runs(data: Path, store: StoreConfig | None) -> list[tuple[str, str]]:
    """Every run in the journal: (run_id, status)."""
    if store is None:
        with sqlite3.connect(data / "runs.db") as db:
            return [(str(r), str(s)) for r, s in db.execute("SELECT run_id, status FROM runs")]
    import asyncpg

    conn = await asyncpg.connect(store.postgres_url, server_settings={"search_path": store.postgres_schema})
    try:
        return [(r["run_id"], r["status"]) for r in await conn.fetch("SELECT run_id, status FROM runs")]
    finally:
        await conn.close()
