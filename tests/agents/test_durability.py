"""Durable runs across `kill -9`: real server process, real mock over HTTP, real SQLite.

Not a unit test on purpose: only a killed process shows what survives a crash.
"""

from __future__ import annotations

import asyncio
import random
import signal
import sqlite3
import sys
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import pytest

from agentos.mock.server import MockSettings
from agentos.testing import eventually
from tests.agents.counting_mock import CountingMock, Key, start_counting_mock
from tests.conftest import child_env

REPO = Path(__file__).resolve().parents[2]
RUNS = 24
KILLS = 5
TERMINAL = {"completed", "failed", "cancelled"}


class ServerProcess:
    def __init__(self, proc: asyncio.subprocess.Process, url: str) -> None:
        self.proc = proc
        self.url = url


async def start_server(
    tmp_path: Path, mock: CountingMock, n: int, *options: str, env: dict[str, str] | None = None
) -> ServerProcess:
    """`tests.agents.run_server` as a process on `tmp_path/data` (`options`: its PostgreSQL ones;
    `env`: the process's environment instead of `child_env()`)."""
    port_file = tmp_path / f"port-{n}"
    argv = [
        "-m",
        "tests.agents.run_server",
        "--data-dir",
        str(tmp_path / "data"),
        "--provider-url",
        mock.url,
        "--port-file",
        str(port_file),
        *options,
    ]
    with (tmp_path / f"server-{n}.log").open("wb") as log:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, *argv, cwd=REPO, env=env or child_env(), stdout=log, stderr=log
        )
    await eventually(lambda: port_file.exists() or proc.returncode is not None, 20.0, "the server to listen")
    assert proc.returncode is None, (tmp_path / f"server-{n}.log").read_text()
    return ServerProcess(proc, f"http://127.0.0.1:{port_file.read_text()}")


async def statuses(http: aiohttp.ClientSession, url: str, runs: list[str]) -> dict[str, dict[str, Any]]:
    async def one(run_id: str) -> dict[str, Any]:
        async with http.get(f"{url}/v1/runs/{run_id}") as response:
            info: dict[str, Any] = await response.json()
            return info

    return dict(zip(runs, await asyncio.gather(*(one(r) for r in runs)), strict=True))


async def answer_waiting(http: aiohttp.ClientSession, url: str, infos: dict[str, dict[str, Any]]) -> None:
    for run_id, info in infos.items():
        pending = info.get("pending")
        if info["status"] != "waiting_human" or pending is None:
            continue
        body = {"operation_id": pending["operation_id"], "answer": "skip" if pending["kind"] == "uncertain" else "yes"}
        async with http.post(f"{url}/v1/runs/{run_id}/answer", json=body) as response:
            assert response.status in (200, 409), await response.text()


async def drive(
    http: aiohttp.ClientSession, url: str, runs: list[str], done: Callable[[dict[str, Any]], bool], timeout_s: float
) -> dict[str, dict[str, Any]]:
    """Answer every human request until `done(statuses)` holds (a bounded poll of the server process)."""
    infos: dict[str, dict[str, Any]] = {}

    async def step() -> bool:
        infos.update(await statuses(http, url, runs))
        if done(infos):
            return True
        await answer_waiting(http, url, infos)
        return False

    await eventually(step, timeout_s, "the runs to progress")
    return infos


def done_model_keys(data_dir: Path) -> set[Key]:
    """(run input, k) of every model call the journal holds as done: the j-th reply of a run has k = j - 1."""
    db = sqlite3.connect(data_dir / "runs.db")
    try:
        rows = db.execute(
            "SELECT r.input, s.seq FROM steps s JOIN runs r USING (run_id) WHERE s.kind = 'model' AND s.status = 'done'"
            " ORDER BY r.run_id, s.seq"
        ).fetchall()
    finally:
        db.close()
    seen: Counter[str] = Counter()
    keys: set[Key] = set()
    for text, _seq in rows:
        keys.add((text, seen[text]))
        seen[text] += 1
    return keys


async def kill_9(server: ServerProcess) -> None:
    server.proc.send_signal(signal.SIGKILL)
    await server.proc.wait()


@pytest.mark.slow
async def test_kill_9_at_random_points_then_every_run_ends_without_repeats(tmp_path: Path) -> None:
    rng = random.Random(20261129)
    mock = await start_counting_mock(MockSettings(scenario="tools", ttft_ms=10, tps=1000, tokens=3))
    snapshots: list[set[Key]] = []
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
            runs: list[str] = []
            for epoch in range(KILLS):
                server = await start_server(tmp_path, mock, epoch)
                if epoch == 0:
                    runs = [await start_run(http, server.url, f"job-{i}") for i in range(RUNS)]
                target = mock.completed() + rng.randint(1, RUNS // 2)
                await drive(http, server.url, runs, partial(progressed, mock, target), 20.0)
                await asyncio.sleep(rng.uniform(0, 0.02))  # spread the kill points, not a wait for anything
                await kill_9(server)
                snapshots.append(done_model_keys(tmp_path / "data"))
                mock.epoch += 1
            server = await start_server(tmp_path, mock, KILLS)
            final = await drive(http, server.url, runs, all_ended, 60.0)
            server.proc.send_signal(signal.SIGTERM)
            await server.proc.wait()
    finally:
        await mock.close()
    snapshots.append(done_model_keys(tmp_path / "data"))
    check_every_run_ended(final)
    check_kills_interrupted_runs(snapshots)
    check_no_journaled_model_call_repeated(mock, snapshots)
    check_no_effect_applied_twice(tmp_path / "data" / "workspaces", runs)
    check_model_events_match_model_steps(journal_rows(tmp_path / "data"))
    check_model_steps_name_their_target(tmp_path / "data")


def progressed(mock: CountingMock, target: int, infos: dict[str, dict[str, Any]]) -> bool:
    return mock.completed() >= target or all_ended(infos)


def all_ended(infos: dict[str, dict[str, Any]]) -> bool:
    return all(info["status"] in TERMINAL for info in infos.values())


async def start_run(http: aiohttp.ClientSession, url: str, text: str) -> str:
    async with http.post(f"{url}/v1/agents/ops/runs", json={"input": text}) as response:
        assert response.status == 202, await response.text()
        return str((await response.json())["run_id"])


def check_every_run_ended(final: dict[str, dict[str, Any]]) -> None:
    for run_id, info in final.items():
        assert info["status"] in ("completed", "failed"), (run_id, info)
        assert info["reason"], (run_id, info)
        if info["status"] == "completed":
            assert info["result"], (run_id, info)


def check_kills_interrupted_runs(snapshots: list[set[Key]]) -> None:
    """The test means something only if some kill fell in the middle of some run."""
    per_run = [Counter(text for text, _k in snapshot) for snapshot in snapshots[:-1]]
    assert any(0 < n < 4 for counts in per_run for n in counts.values())


def check_no_journaled_model_call_repeated(mock: CountingMock, snapshots: list[set[Key]]) -> None:
    """Within one server life a model call is made once; once journaled, it is never made again.

    A call the mock finished but the server had not journaled when it was killed is made again
    after the restart: that is the at-least-once window of a call with no side effects.
    """
    for (key, epoch), count in mock.completions.items():
        assert count == 1, f"{key} completed {count} times in server life {epoch}"
        journaled_in = next(i for i, snapshot in enumerate(snapshots) if key in snapshot)
        assert epoch <= journaled_in, f"{key} was journaled in life {journaled_in} but called again in life {epoch}"


def check_no_effect_applied_twice(workspaces: Path, runs: list[str]) -> None:
    applied = 0
    for run_id in runs:
        log = workspaces / run_id / "effects.log"
        lines = log.read_text().splitlines() if log.exists() else []
        assert len(lines) == len(set(lines)), f"{run_id}: {lines}"
        assert set(lines) <= {"step-1", "step-2"}
        applied += len(lines)
    assert applied > 0


def check_model_steps_name_their_target(data_dir: Path) -> None:
    """Every journaled model reply names the router's target that answered it (the simple
    `--provider-url` form: the provider `default`), through every kill and resume."""
    db = sqlite3.connect(data_dir / "runs.db")
    try:
        bodies = db.execute(
            "SELECT p.body FROM steps s JOIN payloads p ON p.hash = s.payload_ref"
            " WHERE s.kind = 'model' AND s.status = 'done'"
        ).fetchall()
    finally:
        db.close()
    assert bodies
    for (body,) in bodies:
        assert msgspec.json.decode(body)["target"] == "default/mock-1", body


def journal_rows(data_dir: Path) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """(run_id, seq, status, attempts) of every model step; (run_id, seq, type, data) of every event."""
    db = sqlite3.connect(data_dir / "runs.db")
    try:
        steps = db.execute("SELECT run_id, seq, status, attempts FROM steps WHERE kind = 'model'").fetchall()
        events = db.execute("SELECT run_id, seq, type, data FROM run_events ORDER BY run_id, seq").fetchall()
    finally:
        db.close()
    return steps, events


def check_model_events_match_model_steps(rows: tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]) -> None:
    """A model call's events commit with its step, so across the kills: one `model.started` per
    attempt the step counts, one `model.completed` per finished step, never a duplicate; and
    each run's event seqs have no gap. (Whether a kill cut a model call varies from run to run:
    test_resume.py cuts one on purpose.)"""
    steps, events = rows
    started: Counter[tuple[str, int]] = Counter()
    completed: Counter[str] = Counter()
    seqs: dict[str, list[int]] = {}
    for run_id, seq, kind, data in events:
        seqs.setdefault(run_id, []).append(seq)
        if kind == "model.started":
            value = msgspec.json.decode(data)
            started[(value["operation_id"], value["attempt"])] += 1
        elif kind == "model.completed":
            completed[msgspec.json.decode(data)["operation_id"]] += 1
    expected_started = Counter(
        (f"{run_id}:{seq}", n) for run_id, seq, _s, attempts in steps for n in range(1, attempts + 1)
    )
    assert started == expected_started
    assert completed == Counter(f"{run_id}:{seq}" for run_id, seq, status, _a in steps if status == "done")
    for run_id, numbers in seqs.items():
        assert numbers == list(range(1, len(numbers) + 1)), run_id
