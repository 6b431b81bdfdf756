"""The issue's proof, shortened: three `agentos serve` nodes on one PostgreSQL schema fire a
schedule every second while one of them is killed (kill -9); every slot from the first to the
last fired exactly once: one fire row, one run, no gap, none twice."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from agentos.config import StoreConfig
from agentos.mock.server import MockServer
from agentos.testing import eventually
from tests.coordination.cluster import node_env, pg_rows, serve_nodes
from tests.postgres import fresh_schema

pytest.importorskip("asyncpg")

BEFORE_KILL = 8  # fires seen before node 1 dies
AFTER_KILL = 12  # ... and after (more than the 10 s lease a fire the dead node held would wait)


@pytest.fixture
async def pg() -> AsyncIterator[StoreConfig]:
    async for config in fresh_schema():
        yield config


async def fired(pg: StoreConfig, schedule_id: str) -> int:
    rows = await pg_rows(pg, "SELECT count(*) FROM schedule_fires WHERE schedule_id = $1", schedule_id)
    return int(rows[0][0])


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_three_nodes_fire_every_slot_once_while_one_is_killed(
    tmp_path: Path, mock: MockServer, pg: StoreConfig, http: aiohttp.ClientSession
) -> None:
    async with serve_nodes(3, tmp_path, mock.url, node_env(pg)) as nodes:
        async with http.post(f"{nodes[0].url}/v1/agents", json={"name": "ops", "tools": []}) as r:
            assert r.status == 201, await r.text()
        body = {"agent": "ops", "input": "tick", "every_s": 1, "max_runs_in_flight": 100}
        async with http.post(f"{nodes[2].url}/v1/schedules", json=body) as r:
            assert r.status == 201, await r.text()
            schedule_id = (await r.json())["schedule_id"]

        async def at_least(n: int) -> bool:
            return await fired(pg, schedule_id) >= n

        await eventually(lambda: at_least(BEFORE_KILL), timeout_s=30, what=f"{BEFORE_KILL} fires")
        victim = f"-{nodes[1].proc.pid}-"  # in its node id (agentos.coordination.node)

        async def victim_fired() -> bool:
            sql = "SELECT count(*) FROM schedule_fires WHERE schedule_id = $1 AND lease_owner LIKE $2"
            return int((await pg_rows(pg, sql, schedule_id, f"%{victim}%"))[0][0]) > 0

        await eventually(victim_fired, timeout_s=30, what="a fire started by the node to be killed")
        await nodes[1].kill()
        seen = await fired(pg, schedule_id)
        await eventually(lambda: at_least(seen + AFTER_KILL), timeout_s=40, what=f"{AFTER_KILL} more fires")
        async with http.post(f"{nodes[0].url}/v1/schedules/{schedule_id}/pause") as r:
            assert r.status == 200

        async def all_started() -> bool:
            sql = "SELECT count(*) FROM schedule_fires WHERE schedule_id = $1 AND status = 'pending'"
            return int((await pg_rows(pg, sql, schedule_id))[0][0]) == 0

        await eventually(all_started, timeout_s=30, what="the dead node's fires started by the others")
        sql = "SELECT slot_ms, status, run_id, lease_owner FROM schedule_fires WHERE schedule_id = $1 ORDER BY slot_ms"
        fires = await pg_rows(pg, sql, schedule_id)
        slots = [f["slot_ms"] for f in fires]
        assert slots == list(range(slots[0], slots[-1] + 1, 1000)), "a slot missing"  # no gap, none twice (the key)
        assert {f["status"] for f in fires} <= {"started", "finished"}, fires
        run_ids = [f["run_id"] for f in fires]
        runs = await pg_rows(pg, "SELECT run_id FROM runs WHERE run_id = ANY($1::text[])", run_ids)
        assert sorted(r["run_id"] for r in runs) == sorted(run_ids)  # every fire's run exists, once (its key)
        every_run = await pg_rows(pg, "SELECT count(*) FROM runs WHERE agent = 'ops'")
        assert every_run[0][0] == len(run_ids)  # and no run that no fire names
