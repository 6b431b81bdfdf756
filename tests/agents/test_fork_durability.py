"""A fork across `kill -9`: its copied steps are never made again, and the live call it was in
when the server died is made again once (real server process, real mock over HTTP, real SQLite).

Not a unit test on purpose: only a killed process shows what survives a crash.
"""

from __future__ import annotations

import signal
from pathlib import Path

import aiohttp
import pytest

from agentos.mock.server import MockSettings
from tests.agents.counting_mock import start_counting_mock
from tests.agents.test_durability import TERMINAL, drive, kill_9, start_run, start_server


@pytest.mark.slow
async def test_a_fork_killed_mid_call_resumes_without_repeating_its_copied_steps(tmp_path: Path) -> None:
    mock = await start_counting_mock(MockSettings(scenario="tools", ttft_ms=10, tps=1000, tokens=3))
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as http:
            server = await start_server(tmp_path, mock, 0)
            run_id = await start_run(http, server.url, "job")
            original = await drive(http, server.url, [run_id], lambda infos: infos[run_id]["status"] in TERMINAL, 30.0)
            assert original[run_id]["status"] == "completed"
            # Fork after the first command (step 2): its next model call (k = 1) waits at the door.
            mock.hold = lambda key: key == ("job", 1)
            async with http.post(f"{server.url}/v1/runs/{run_id}/fork", json={"at_seq": 2}) as r:
                assert r.status == 202, await r.text()
                fork_id = (await r.json())["run_id"]
            assert await mock.wait_held(1, 10.0) == [("job", 1)]
            await kill_9(server)
            mock.epoch += 1
            server = await start_server(tmp_path, mock, 1)
            assert await mock.wait_held(1, 10.0) == [("job", 1)]  # resumed at the same call, once
            mock.released.set()
            final = await drive(http, server.url, [fork_id], lambda infos: infos[fork_id]["status"] in TERMINAL, 30.0)
            server.proc.send_signal(signal.SIGTERM)
            await server.proc.wait()
    finally:
        await mock.close()
    fork = final[fork_id]
    assert fork["status"] == "completed" and fork["result"] == original[run_id]["result"]
    assert fork["forked_from"] == {"run_id": run_id, "at_seq": 2}
    # The fork's first model call (k = 0) and command came from the journal, in no life of the server.
    forked_calls = {(key, epoch): n for (key, epoch), n in mock.completions.items() if epoch == 1}
    assert forked_calls == {(("job", 1), 1): 1, (("job", 2), 1): 1, (("job", 3), 1): 1}
    assert mock.completions[(("job", 0), 0)] == 1  # the original's, once
    workspaces = tmp_path / "data" / "workspaces"
    assert (workspaces / fork_id / "effects.log").read_text() == "step-2\n"
    assert (workspaces / run_id / "effects.log").read_text() == "step-1\nstep-2\n"
