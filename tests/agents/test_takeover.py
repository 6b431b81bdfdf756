"""Runs shared by real server processes on one PostgreSQL schema: a run answered (and one
terminated) on a node that does not run it, and `kill -9` of the node that runs 50, whose runs
the two other nodes take over when their leases expire, without repeating a journaled step.

The nodes share one data dir, as nodes share a volume for the run workspaces (the effects log
of the `tools` scenario is written there); the journal, sessions and leases are in PostgreSQL.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

import agentos_bench.chaos
from agentos.config import StoreConfig
from agentos.mock.server import MockSettings
from agentos.store import pg_pool
from agentos.testing import eventually, sse_events
from tests.agents.counting_mock import CountingMock, Key, start_counting_mock
from tests.agents.test_durability import (
    ServerProcess,
    all_ended,
    check_every_run_ended,
    check_kills_interrupted_runs,
    check_model_events_match_model_steps,
    check_no_effect_applied_twice,
    check_no_journaled_model_call_repeated,
    drive,
    kill_9,
    start_run,
    start_server,
    statuses,
)
from tests.conftest import child_env

LEASE_S = 2.0
CLOCK_STEP = Path(agentos_bench.chaos.__file__).parent / "clockstep"  # its sitecustomize steps time.time
RUNS = 50


@pytest.fixture
async def mock() -> AsyncIterator[CountingMock]:
    counting = await start_counting_mock(MockSettings(scenario="tools", ttft_ms=10, tps=1000, tokens=3))
    yield counting
    await counting.close()


async def node(
    tmp_path: Path, mock: CountingMock, n: int, pg: StoreConfig, *extra: str, env: dict[str, str] | None = None
) -> ServerProcess:
    """A node of the cluster on `pg` (`extra`: more `tests.agents.run_server` options, e.g. Redis;
    `env`: its environment, `child_env()` if None)."""
    options = [
        "--postgres-url",
        pg.postgres_url,
        "--postgres-schema",
        pg.postgres_schema,
        "--run-lease-s",
        str(LEASE_S),
        *extra,
    ]
    return await start_server(tmp_path, mock, n, *options, env=env)


async def stop(*servers: ServerProcess) -> None:
    for server in servers:
        if server.proc.returncode is None:
            server.proc.send_signal(signal.SIGTERM)
            await server.proc.wait()


async def sql(pg: StoreConfig, statement: str, *params: Any) -> list[Any]:
    conn = await pg_pool.connect(pg)
    try:
        return list(await conn.fetch(statement, *params))
    finally:
        await conn.close()


async def waiting_human(http: aiohttp.ClientSession, url: str, run_id: str, what: str) -> None:
    """Until the run waits for a human, as `url` reads it."""

    async def waiting() -> bool:
        status: str = (await statuses(http, url, [run_id]))[run_id]["status"]
        return status == "waiting_human"

    await eventually(waiting, 20.0, what)


def owned_by(server: ServerProcess) -> str:
    """A LIKE pattern for the node ids of `server`'s process (hostname-pid-random)."""
    return f"%-{server.proc.pid}-%"


async def done_model_keys(pg: StoreConfig) -> set[Key]:
    """(run input, k) of every model call the journal holds as done (as test_durability's, on PostgreSQL)."""
    rows = await sql(
        pg,
        "SELECT r.input, s.seq FROM steps s JOIN runs r USING (run_id) WHERE s.kind = 'model' AND s.status = 'done'"
        " ORDER BY r.run_id, s.seq",
    )
    seen: Counter[str] = Counter()
    keys: set[Key] = set()
    for text, _seq in rows:
        keys.add((text, seen[text]))
        seen[text] += 1
    return keys


@pytest.mark.slow
async def test_a_run_is_answered_on_a_node_that_does_not_run_it(
    tmp_path: Path, mock: CountingMock, pg: StoreConfig
) -> None:
    a = await node(tmp_path, mock, 0, pg)
    b = await node(tmp_path, mock, 1, pg)
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as http:
            run_id = await start_run(http, a.url, "job-answered-elsewhere")

            await waiting_human(http, b.url, run_id, "the run to wait for a human, read on the other node")
            [owner] = await sql(pg, "SELECT owner FROM run_leases WHERE run_id = $1", run_id)
            assert f"-{a.proc.pid}-" in owner[0]  # A runs it, B only reads it
            pending = (await statuses(http, b.url, [run_id]))[run_id]["pending"]
            body = {"operation_id": pending["operation_id"], "answer": "yes"}
            async with http.post(f"{b.url}/v1/runs/{run_id}/answer", json=body) as response:
                assert response.status == 200, await response.text()
            async with http.post(f"{b.url}/v1/runs/{run_id}/answer", json={"operation_id": "x:1"}) as response:
                assert response.status == 409  # checked on B against the journal
            async with http.get(f"{b.url}/v1/runs/{run_id}/events") as response:
                names = [event.name async for event in sse_events(response)]
            assert names[-1] == "run.completed" and "human.answered" in names
            assert "run.resumed" not in names  # A finished it: no takeover happened
            info = (await statuses(http, a.url, [run_id]))[run_id]
            assert info["status"] == "completed" and info["result"]
            other = await start_run(http, a.url, "job-terminated-elsewhere")
            async with http.post(f"{b.url}/v1/runs/{other}/terminate") as response:
                assert response.status == 200, await response.text()
                terminated = await response.json()  # answered once the owner (A) ended it
            assert (terminated["status"], terminated["reason"]) == ("cancelled", "terminated")
    finally:
        await stop(a, b)


@pytest.mark.slow
async def test_a_node_whose_clock_stepped_an_hour_ahead_takes_over_a_waiting_run_without_expiring_it(
    tmp_path: Path, mock: CountingMock, pg: StoreConfig
) -> None:
    """A human deadline is journaled in wall time (now + `human_timeout_s`, an hour here) and
    judged by the node that resumes the run. B's wall clock is an hour ahead (the chaos
    campaign's clock step, `agentos_bench/chaos/clockstep`): judged by B's own clock, the run
    taken over from A would fail `human_timeout` at once; the nodes keep deadlines by
    PostgreSQL's clock, so it still waits, and an answer completes it."""
    step = tmp_path / "clock-step"
    step.write_text("3600")
    stepped = child_env(AGENTOS_BENCH_CLOCK_STEP_FILE=str(step))
    stepped["PYTHONPATH"] = os.pathsep.join([str(CLOCK_STEP), stepped["PYTHONPATH"]])
    a = await node(tmp_path, mock, 0, pg)
    b = await node(tmp_path, mock, 1, pg, env=stepped)
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as http:
            run_id = await start_run(http, a.url, "job-waiting-through-a-takeover")

            await waiting_human(http, b.url, run_id, "the run to wait for a human on A")
            await kill_9(a)

            async def owned_by_b() -> bool:
                [row] = await sql(pg, "SELECT owner FROM run_leases WHERE run_id = $1", run_id)
                return f"-{b.proc.pid}-" in row[0]

            await eventually(owned_by_b, 20.0, "B to take the run over")
            info = (await statuses(http, b.url, [run_id]))[run_id]
            assert info["status"] == "waiting_human", info  # not failed: human_timeout
            body = {"operation_id": info["pending"]["operation_id"], "answer": "yes"}

            async def answered() -> bool:
                # Between B's claim of the lease and its resume of the run, B answers 409
                # `not_waiting` (its kernel does not hold the wait yet): a known window.
                async with http.post(f"{b.url}/v1/runs/{run_id}/answer", json=body) as response:
                    text = await response.text()
                    assert response.status == 200 or "not_waiting" in text, text
                    return response.status == 200

            await eventually(answered, 20.0, "B to take the answer once it resumed the run")
            async with http.get(f"{b.url}/v1/runs/{run_id}/events") as response:
                names = [event.name async for event in sse_events(response)]
            assert names[-1] == "run.completed" and "human.answered" in names
    finally:
        await stop(a, b)


@pytest.mark.slow
async def test_kill_9_of_the_owner_hands_every_run_to_the_survivors_without_repeats(
    tmp_path: Path, mock: CountingMock, pg: StoreConfig
) -> None:
    a, b, c = [await node(tmp_path, mock, n, pg) for n in range(3)]
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as http:
            runs = list(await asyncio.gather(*(start_run(http, a.url, f"job-{i}") for i in range(RUNS))))

            async def under_way() -> bool:  # journaled, not only answered by the mock
                return len(await done_model_keys(pg)) >= RUNS // 2

            await eventually(under_way, 30.0, "the runs to be under way on A")
            await kill_9(a)
            killed_at = asyncio.get_running_loop().time()
            before = await done_model_keys(pg)
            mock.epoch += 1

            owners: set[str] = set()  # every node seen holding a lease (all the runs were A's)

            async def taken_over() -> bool:
                now = {row[0] for row in await sql(pg, "SELECT owner FROM run_leases")}
                owners.update(now)
                return not any(f"-{a.proc.pid}-" in owner for owner in now)

            await eventually(taken_over, LEASE_S * 2 + 10.0, "B and C to take over A's runs")
            took_s = asyncio.get_running_loop().time() - killed_at
            await taken_over()  # one more look: the last claims of the rounds
            # Every request goes to B: those for C's runs are C's to apply.
            final = await drive(http, b.url, runs, all_ended, LEASE_S + 60.0)
    finally:
        await stop(a, b, c)
    assert took_s < LEASE_S * 2 + 10.0
    # Both survivors took some (each claims its share per round; the old code: the first took all).
    assert all(any(f"-{server.proc.pid}-" in owner for owner in owners) for server in (b, c)), owners
    check_every_run_ended(final)
    check_kills_interrupted_runs([before, set()])
    resumed = await sql(pg, "SELECT count(DISTINCT run_id) FROM run_events WHERE type = 'run.resumed'")
    assert resumed[0][0] > 0  # A's runs were resumed from the journal
    check_no_journaled_model_call_repeated(mock, [before, await done_model_keys(pg)])
    check_no_effect_applied_twice(tmp_path / "data" / "workspaces", runs)
    steps = await sql(pg, "SELECT run_id, seq, status, attempts FROM steps WHERE kind = 'model'")
    events = await sql(pg, "SELECT run_id, seq, type, data FROM run_events ORDER BY run_id, seq")
    check_model_events_match_model_steps(([tuple(r) for r in steps], [tuple(r) for r in events]))
