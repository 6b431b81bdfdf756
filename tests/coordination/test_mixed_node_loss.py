"""kill -9 of one of three nodes (real processes, one PostgreSQL schema, one Redis) while plain
turns and durable runs are in flight on it and on the two others: every acknowledged turn has
its answer stored, every run ends exactly once on the survivors (the victim's taken over from
the journal) with no model call or tool step repeated, and the survivors keep serving.

Deterministic: the mock holds chosen calls at its door (`CountingMock.hold`), so at the kill the
test knows which turns and runs have a call under way, and none of them can finish before it;
the victim's are dropped by the kill (the mock sees its callers go), then the rest go on.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import msgspec
import pytest

from agentos.agents.handle import TERMINAL_EVENTS
from agentos.config import StoreConfig
from agentos.mock.server import MockSettings
from agentos.testing import eventually
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
    statuses,
)
from tests.agents.test_takeover import LEASE_S, done_model_keys, node, sql, stop
from tests.api.helpers import new_session
from tests.conftest import REDIS_URL
from tests.coordination.test_node_loss import completed_turn

pytest.importorskip("asyncpg")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

NODES = 3
HELD_RUNS = 2  # per node: runs whose second model call is under way at the kill (step-1 journaled)
WAITING_RUNS = 2  # on the victim: runs parked for a human at the kill
HELD_TURNS = 2  # per node: turns whose provider call is under way at the kill
DONE_TURNS = 2  # per node: turns acknowledged before it


def held(key: Key) -> bool:
    """The calls the mock holds until the kill: a held turn's, and a held run's second model call."""
    text, k = key
    return text.startswith("hold-turn-") or (text.startswith("hold-run-") and k == 1)


def only_runs_calls(mock: CountingMock) -> None:
    """Forget the turns' calls: the journal check is about runs (a turn has no journal to replay)."""
    for key, epoch in list(mock.completions):
        if not key[0].startswith(("hold-run-", "wait-run-")):
            del mock.completions[(key, epoch)]


@pytest.fixture
async def mock() -> AsyncIterator[CountingMock]:
    counting = await start_counting_mock(MockSettings(scenario="tools", ttft_ms=10, tps=1000, tokens=3))
    counting.hold = held
    yield counting
    counting.released.set()
    await counting.close()


async def turns(http: aiohttp.ClientSession, server: ServerProcess, texts: list[str]) -> list[asyncio.Task[str | None]]:
    sessions = [await new_session(http, server.url) for _ in texts]
    return [
        asyncio.create_task(completed_turn(http, server, session, asyncio.Event(), text=text))
        for session, text in zip(sessions, texts, strict=True)
    ]


async def test_kill_9_with_turns_and_runs_in_flight_everywhere(
    tmp_path: Path, mock: CountingMock, pg: StoreConfig, prefix: str
) -> None:
    redis = ("--redis-url", REDIS_URL, "--redis-prefix", prefix)
    servers = [await node(tmp_path, mock, n, pg, *redis) for n in range(NODES)]
    victim, survivors = servers[-1], servers[:-1]
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
            done = [
                t
                for n, s in enumerate(servers)
                for t in await turns(http, s, [f"t-{n}-{i}" for i in range(DONE_TURNS)])
            ]
            acknowledged_before = await asyncio.gather(*done)
            assert all(acknowledged_before)
            held_runs = {
                n: [await start_run(http, s.url, f"hold-run-{n}-{i}") for i in range(HELD_RUNS)]
                for n, s in enumerate(servers)
            }
            waiting = [await start_run(http, victim.url, f"wait-run-{i}") for i in range(WAITING_RUNS)]
            in_flight = {
                n: await turns(http, s, [f"hold-turn-{n}-{i}" for i in range(HELD_TURNS)])
                for n, s in enumerate(servers)
            }
            await mock.wait_held(NODES * (HELD_RUNS + HELD_TURNS), 30.0)  # every held call is under way

            async def parked() -> bool:
                infos = await statuses(http, victim.url, waiting)
                return all(info["status"] == "waiting_human" for info in infos.values())

            await eventually(parked, 30.0, "the victim's runs to wait for a human")
            await kill_9(victim)
            # The victim's held calls go with it (the mock sees them dropped) before the others
            # may go on: a held call of the victim can never complete after the kill.
            await mock.wait_dropped(HELD_RUNS + HELD_TURNS, 10.0)
            before = await done_model_keys(pg)
            mock.epoch += 1
            mock.released.set()
            cut = await asyncio.gather(*in_flight[NODES - 1])
            finished = [await asyncio.gather(*in_flight[n]) for n in range(NODES - 1)]
            runs = [*(r for rs in held_runs.values() for r in rs), *waiting]
            final = await drive(http, survivors[0].url, runs, all_ended, LEASE_S + 60.0)
            later = [await turns(http, s, [f"after-{n}"]) for n, s in enumerate(survivors)]
            served_after = [await task for tasks in later for task in tasks]
        after = await done_model_keys(pg)
        messages = await sql(pg, "SELECT turn_id, role, status FROM messages")
        events = await sql(pg, "SELECT run_id, seq, type, data FROM run_events ORDER BY run_id, seq")
        steps = await sql(pg, "SELECT run_id, seq, status, attempts FROM steps WHERE kind = 'model'")
    finally:
        await stop(*servers)
    # Turns: the victim's in flight were cut (never acknowledged); everyone else's completed.
    assert cut == [None] * HELD_TURNS
    assert all(turn_id for turn_ids in finished for turn_id in turn_ids)
    assert all(served_after)  # the survivors keep serving
    acknowledged = {t for t in [*acknowledged_before, *(t for ts in finished for t in ts), *served_after] if t}
    answered = {turn_id for turn_id, role, status in messages if role == "assistant" and status == "completed"}
    asked = {turn_id for turn_id, role, _ in messages if role == "user"}
    assert acknowledged - answered == set()  # 0 acknowledged answers lost...
    assert acknowledged - asked == set()  # ...and 0 questions
    # Runs: each ends once; the victim's were resumed elsewhere; no journaled step was done twice.
    check_every_run_ended(final)
    ends = Counter(run_id for run_id, _seq, kind, _data in events if kind in TERMINAL_EVENTS)
    assert ends == Counter({run_id: 1 for run_id in runs})
    resumed = {run_id for run_id, _seq, kind, _data in events if kind == "run.resumed"}
    # Taken over: the victim's working runs resumed from the journal elsewhere (a survivor's too
    # only if it stalled past a lease); its parked runs park again there (no event), and their
    # answers and ends, all after the kill, were a survivor's doing.
    assert set(held_runs[NODES - 1]) <= resumed
    check_kills_interrupted_runs([before, after])
    only_runs_calls(mock)
    check_no_journaled_model_call_repeated(mock, [before, after])
    check_no_effect_applied_twice(tmp_path / "data" / "workspaces", runs)
    check_model_events_match_model_steps(([tuple(r) for r in steps], [tuple(r) for r in events]))
    results = Counter(
        msgspec.json.decode(data)["operation_id"] for _r, _s, kind, data in events if kind == "tool.result"
    )
    assert set(results.values()) == {1}  # every tool step's result journaled once
