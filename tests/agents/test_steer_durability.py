"""A steered run across `kill -9`: its message is journaled once, and a replay after the crash
puts it back once (real server process, real mock over HTTP, real SQLite).

Not a unit test on purpose: only a killed process shows what survives a crash.
"""

from __future__ import annotations

import signal
import sqlite3
from pathlib import Path

import aiohttp
import pytest

from agentos.mock.server import MockSettings
from agentos.testing import sse_events
from tests.agents.counting_mock import start_counting_mock
from tests.agents.test_durability import TERMINAL, drive, kill_9, start_run, start_server

STEER = "use blue"


@pytest.mark.slow
async def test_a_steer_answered_before_a_kill_is_delivered_exactly_once_after_it(tmp_path: Path) -> None:
    mock = await start_counting_mock(MockSettings(scenario="tools", ttft_ms=10, tps=1000, tokens=3))
    mock.hold = lambda key: key == (STEER, 0)  # the model call that answers the steered message waits
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as http:
            server = await start_server(tmp_path, mock, 0)
            run_id = await start_run(http, server.url, "job")
            async with http.get(f"{server.url}/v1/runs/{run_id}/events") as stream:
                async for event in sse_events(stream):
                    if event.name == "tool.call":  # working: a task, between two model calls
                        break
            async with http.post(f"{server.url}/v1/runs/{run_id}/steer", json={"input": STEER}) as r:
                assert r.status == 200, await r.text()
                steered_at = (await r.json())["seq"]
            assert await mock.wait_held(1, 10.0) == [(STEER, 0)]  # the run called the model with it
            await kill_9(server)  # answered, journaled, and the model call that follows cut off
            mock.epoch += 1
            server = await start_server(tmp_path, mock, 1)
            assert await mock.wait_held(1, 10.0) == [(STEER, 0)]  # the replay calls it again, once
            mock.released.set()
            final = await drive(http, server.url, [run_id], lambda infos: infos[run_id]["status"] in TERMINAL, 30.0)
            server.proc.send_signal(signal.SIGTERM)
            await server.proc.wait()
    finally:
        await mock.close()
    assert final[run_id]["status"] == "completed", final
    db = sqlite3.connect(tmp_path / "data" / "runs.db")
    try:
        user_steps = db.execute("SELECT seq FROM steps WHERE run_id = ? AND kind = 'user'", (run_id,)).fetchall()
        steered_events = db.execute(
            "SELECT count(*) FROM run_events WHERE run_id = ? AND type = 'run.steered'", (run_id,)
        ).fetchone()[0]
    finally:
        db.close()
    assert user_steps == [(steered_at,)] and steered_events == 1
    # each model call after the steer completed once, in the life that journaled it
    assert all(count == 1 for count in mock.completions.values())
    assert mock.completions[((STEER, 0), 0)] == 0  # cut off by the kill: never completed before it
