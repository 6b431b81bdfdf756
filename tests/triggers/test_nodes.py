"""Two nodes on one PostgreSQL database: deliveries accepted by either, the runs started by
whichever node claims them, each exactly once; a redelivery to the other node answers the same
run."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agentos.mock.server import MockServer
from agentos.testing import eventually
from tests.triggers.webhooks import Sender, backends, create_trigger, metric, run_outcome, serve

DELIVERIES = 100
PEPPER = "nodes-share-this-pepper-0123456789"


@pytest.fixture
async def on_postgres() -> AsyncIterator[dict[str, Any]]:
    async for settings in backends("postgres"):
        yield settings


async def test_deliveries_to_either_node_each_run_once(
    tmp_path: Path, mock: MockServer, http: aiohttp.ClientSession, on_postgres: dict[str, Any]
) -> None:
    shared = {**on_postgres, "security": {"key_pepper": PEPPER}}  # one pepper: one secret on every node
    nodes = [await serve(tmp_path / f"node{i}", mock, shared) for i in range(2)]
    try:
        created = await create_trigger(http, nodes[0].url)
        senders = [Sender(http, node.url, created["trigger_id"], created["secret"]) for node in nodes]
        answers = await asyncio.gather(*(senders[i % 2].send({"i": i}, f"evt-{i}") for i in range(DELIVERIES)))
        assert {a.status for a in answers} == {202}
        again = await senders[1].send({"i": 0}, "evt-0")  # accepted by node 0, retried to node 1
        assert again.status == 200 and again.body["run_id"] == answers[0].body["run_id"]
        run_ids = {a.body["run_id"] for a in answers}
        assert len(run_ids) == DELIVERIES
        outcomes = await asyncio.gather(*(run_outcome(http, nodes[0].url, r) for r in run_ids))
        assert set(outcomes) == {"run.completed"}
        await mock.stats.wait_for(lambda s: s.completed >= DELIVERIES, timeout_s=30, what="every run's answer")
        assert mock.stats.requests == DELIVERIES  # one model call per run: none started twice

        async def started_total() -> float:
            total = 0.0
            for node in nodes:
                async with http.get(f"{node.url}/metrics") as r:
                    total += metric(await r.text(), "agentos_trigger_runs_started_total")
            return total

        await eventually(lambda: _equals(started_total(), DELIVERIES), what="every delivery marked started")
    finally:
        for node in nodes:
            await node.close()


async def _equals(value: Any, expected: float) -> bool:
    return bool(await value == expected)
