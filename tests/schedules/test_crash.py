"""A single node (SQLite) killed with kill -9 while an every-second schedule fires, then started
again on the same data directory: the schedule goes on, and no slot fires twice (the fires it
had claimed before the kill start with their own run ids, taken back at once on restart)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import aiohttp
import pytest

from agentos.mock.server import MockServer
from agentos.testing import eventually
from tests.coordination.cluster import serve_nodes


def fires(data: Path) -> list[tuple[int, str, str]]:
    with sqlite3.connect(data / "node0" / "schedules.db") as db:
        return list(db.execute("SELECT slot_ms, status, run_id FROM schedule_fires ORDER BY slot_ms"))


@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_a_killed_node_restarts_its_schedule_without_firing_a_slot_twice(
    tmp_path: Path, mock: MockServer, http: aiohttp.ClientSession
) -> None:
    async with serve_nodes(1, tmp_path, mock.url, {}) as (node,):
        async with http.post(f"{node.url}/v1/agents", json={"name": "ops", "tools": []}) as r:
            assert r.status == 201, await r.text()
        body = {"agent": "ops", "input": "tick", "every_s": 1, "max_runs_in_flight": 100, "misfire": "run_once"}
        async with http.post(f"{node.url}/v1/schedules", json=body) as r:
            assert r.status == 201, await r.text()
        await eventually(lambda: _at_least(tmp_path, 4), timeout_s=30, what="4 fires")
        await node.kill()
    before = {slot: run_id for slot, _, run_id in fires(tmp_path)}
    async with serve_nodes(1, tmp_path, mock.url, {}) as (node,):
        await eventually(lambda: _at_least(tmp_path, len(before) + 3), timeout_s=30, what="3 fires after the restart")
        after = fires(tmp_path)

        async def every_run_listed() -> bool:
            async with http.get(f"{node.url}/v1/runs?limit=1000") as r:
                listed = {run["run_id"] for run in (await r.json())["data"]}
            return {run_id for _, status, run_id in after if status in ("started", "finished")} <= listed

        await eventually(every_run_listed, timeout_s=30, what="every started fire's run in the run list")
    slots = [slot for slot, _, _ in after]
    assert len(slots) == len(set(slots))  # the unique key: one fire per slot
    assert {slot: run_id for slot, _, run_id in after if slot in before} == before  # none fired again, new id
    assert all(status in ("started", "finished") for slot, status, _ in after if slot in before)  # taken back


async def _at_least(data: Path, n: int) -> bool:
    try:
        return len(fires(data)) >= n
    except sqlite3.OperationalError:  # the file is not there yet
        return False
