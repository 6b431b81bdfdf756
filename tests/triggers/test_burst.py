"""A thousand deliveries at once: every one answered 2xx, every one's run started exactly once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agentos.mock.server import MockServer
from agentos.testing import eventually
from tests.triggers.webhooks import Answer, Sender, backends, create_trigger, metric, serve

DELIVERIES = 1000
AT_ONCE = 50
RETRIES = 5


@pytest.fixture(params=["sqlite", "postgres"])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[dict[str, Any]]:
    async for settings in backends(request.param):
        yield settings


async def test_a_burst_of_deliveries_each_runs_exactly_once(
    tmp_path: Path, mock_factory, http: aiohttp.ClientSession, backend: dict[str, Any]
) -> None:
    mock: MockServer = await mock_factory(ttft_ms=0, tokens=1)
    server = await serve(tmp_path / "data", mock, backend)
    try:
        created = await create_trigger(http, server.url)
        sender = Sender(http, server.url, created["trigger_id"], created["secret"])
        gate = asyncio.Semaphore(AT_ONCE)

        async def send(i: int) -> Answer:
            # As a webhook sender does: a 503 (the store slow on a saturated machine) is sent
            # again with the same webhook-id after its Retry-After; it must still run once.
            for _ in range(RETRIES):
                async with gate:
                    answer = await sender.send({"i": i}, f"burst-{i}")
                if answer.status != 503:
                    return answer
                await asyncio.sleep(1.0)  # the sender's back-off before it sends again
            return answer

        answers = await asyncio.gather(*(send(i) for i in range(DELIVERIES)))
        assert {a.status for a in answers} == {202}
        run_ids = {a.body["run_id"] for a in answers}
        assert len(run_ids) == DELIVERIES
        await mock.stats.wait_for(lambda s: s.completed >= DELIVERIES, timeout_s=60, what="every run's answer")
        assert mock.stats.requests == DELIVERIES  # one model call per run: no run twice
        runs = server.services.runs
        rows = [await runs.store.load_run("default", run_id) for run_id in run_ids]
        assert all(row is not None for row in rows)

        async def all_marked_started() -> bool:  # marked after each start: moments after the answers
            async with http.get(f"{server.url}/metrics") as r:
                text = await r.text()
            assert metric(text, 'agentos_trigger_deliveries_total{outcome="accepted"}') == DELIVERIES
            return metric(text, "agentos_trigger_runs_started_total") == DELIVERIES

        # A loaded CI machine marks them late; a lost mark never arrives at all.
        await eventually(all_marked_started, what="every delivery marked started", timeout_s=30.0)
    finally:
        await server.close()
