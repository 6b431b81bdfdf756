"""`agentos serve --workers N`: real processes (a supervisor and its workers) on one loopback port,
one PostgreSQL schema, one Redis key prefix, the bench mock as the provider.

Which worker served a turn is read from the log: every worker's lines carry `[w<k> <pid>]`, and
each turn ends with a `turn session=… turn=… outcome=…` line. The supervisor's stderr is a pipe
read line by line here, so a test waits for a line (a worker listening) rather than for time.
Every request goes on a connection of its own (`force_close`): the kernel picks a worker per
connection, so one kept-alive connection would always reach the same one.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agentos.config import StoreConfig
from agentos.mock.server import MockServer
from agentos.testing import eventually
from tests.api.helpers import new_session, turn_events
from tests.conftest import REDIS_URL, child_env
from tests.coordination.cluster import node_env, pg_rows

pytest.importorskip("asyncpg")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

LISTENING = re.compile(r"\[w(\d+) (\d+)\] worker \d+ listening: pid \d+, node (\S+)")
TURN_LINE = re.compile(r"\[w(\d+) (\d+)\] turn session=(\S+) turn=(\S+) outcome=(\S+) reason=(\S+)")
STARTED_S = 60  # PostgreSQL migrations, then two workers on a busy 2-core machine


@dataclass
class Workers:
    """A running `agentos serve --workers N` and what its stderr said so far."""

    proc: asyncio.subprocess.Process
    url: str = ""
    lines: list[str] = field(default_factory=list)
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    async def wait_line(self, pattern: re.Pattern[str], count: int = 1, timeout_s: float = STARTED_S) -> list[str]:
        """The first `count` log lines that match `pattern`, once there are that many."""
        async with asyncio.timeout(timeout_s), self.changed:
            await self.changed.wait_for(lambda: len(self.matching(pattern)) >= count)
        return self.matching(pattern)[:count]

    def matching(self, pattern: re.Pattern[str]) -> list[str]:
        return [line for line in self.lines if pattern.search(line)]

    def pids(self) -> dict[int, int]:
        """The pid of each worker now (the last to listen under its number)."""
        return {int(m[1]): int(m[2]) for line in self.matching(LISTENING) if (m := LISTENING.search(line))}

    def turns(self) -> dict[str, tuple[int, str, str]]:
        """Each turn's worker pid, outcome and reason, from its last log line."""
        found = (TURN_LINE.search(line) for line in self.lines)
        return {m[4]: (int(m[2]), m[5], m[6]) for m in found if m}

    async def stop(self, sig: int = signal.SIGINT) -> int:
        """Signal the supervisor; its exit status, with the log's tail after a failure."""
        self.proc.send_signal(sig)
        async with asyncio.timeout(30):
            code = await self.proc.wait()
        if code != 0:
            print("\n".join(self.lines[-40:]))
        return code


async def _read_stderr(workers: Workers) -> None:
    assert workers.proc.stderr is not None
    while line := await workers.proc.stderr.readline():
        async with workers.changed:
            workers.lines.append(line.decode(errors="replace").rstrip())
            workers.changed.notify_all()


@asynccontextmanager
async def serve_workers(
    count: int, data: Path, mock_url: str, env: dict[str, str], args: Sequence[str] = ()
) -> AsyncIterator[Workers]:
    """`agentos serve --workers count` on port 0, once every worker listens."""
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "agentos", "serve", "--workers", str(count), "--port", "0"),
        *("--data-dir", str(data), "--provider-url", mock_url, *args),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=child_env(**env),
    )
    workers = Workers(proc)
    reader = asyncio.create_task(_read_stderr(workers))
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), STARTED_S)).decode()
        assert line.startswith("agentos listening on "), line + "\n".join(workers.lines[-30:])
        workers.url = line.split()[-1]
        await workers.wait_line(LISTENING, count)
        yield workers
    finally:
        if proc.returncode is None:
            proc.kill()  # the workers see their stdin close and stop by themselves
            await proc.wait()
        async with asyncio.timeout(30):
            await reader  # the end of stderr: every worker has exited too


@pytest.fixture
async def fresh() -> AsyncIterator[aiohttp.ClientSession]:
    """A client that opens a connection per request, so the kernel chooses a worker each time."""
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=30)) as session:
        yield session


async def test_last_wins_holds_across_workers(
    tmp_path: Path, mock_factory: Any, pg: StoreConfig, prefix: str, fresh: aiohttp.ClientSession
) -> None:
    """Twelve sessions, two turns each: the first waits for its first token when the second
    arrives, on whichever worker the kernel picks. Each first turn ends superseded, each second
    completes, and at least one session's two turns ran on different workers (all land on one
    worker with probability 2^-11)."""
    slow: MockServer = await mock_factory(ttft_ms=2500, tps=200, tokens=3)
    sessions = 12
    async with serve_workers(2, tmp_path, slow.url, node_env(pg, REDIS_URL, prefix)) as workers:
        ids = [await new_session(fresh, workers.url) for _ in range(sessions)]
        firsts = [asyncio.create_task(turn_events(fresh, workers.url, sid, "first")) for sid in ids]
        await slow.stats.wait_for(lambda s: s.requests == sessions, what="every first turn upstream")
        seconds = await asyncio.gather(*(turn_events(fresh, workers.url, sid, "second") for sid in ids))
        events1 = await asyncio.gather(*firsts)
        node_ids = {m[3] for line in workers.lines if (m := LISTENING.search(line))}
        assert await workers.stop() == 0
        ran = workers.turns()
        rows = await pg_rows(pg, "SELECT turn_id, role FROM messages WHERE role = 'assistant'")
    assert len(node_ids) == 2  # each worker is a node of its own
    for first, second in zip(events1, seconds, strict=True):
        assert (first[-1].name, first[-1].data["reason"]) == ("turn.cancelled", "superseded")
        assert second[-1].name == "turn.completed"
    pairs = [(ran[f[0].data["turn_id"]], ran[s[0].data["turn_id"]]) for f, s in zip(events1, seconds, strict=True)]
    assert all(a[1:] == ("cancelled", "superseded") and b[1:] == ("completed", "-") for a, b in pairs)
    assert len({pid for pair in pairs for pid, _, _ in pair}) == 2  # both workers served turns
    assert any(a[0] != b[0] for a, b in pairs)  # a turn superseded by one on the other worker
    answered = {row[0] for row in rows}
    assert answered == {s[0].data["turn_id"] for s in seconds}  # no superseded answer stored


async def test_the_provider_limit_holds_for_the_workers_together(
    tmp_path: Path, mock_factory: Any, pg: StoreConfig, prefix: str, fresh: aiohttp.ClientSession
) -> None:
    """`kernel.concurrency_limit = 2` over two workers: 16 turns at once, both workers serve some
    (all on one with probability 2^-15), and the provider never sees more than 2 streams."""
    slow: MockServer = await mock_factory(ttft_ms=300, tps=200, tokens=3)
    env = node_env(pg, REDIS_URL, prefix)
    async with serve_workers(2, tmp_path, slow.url, env, ["--concurrency-limit", "2"]) as workers:
        turns = await asyncio.gather(*(_one_turn(fresh, workers.url) for _ in range(16)))
        assert await workers.stop() == 0
        ran = workers.turns()
    assert len({ran[t][0] for t in turns}) == 2
    assert slow.stats.max_concurrent == 2


async def test_a_killed_worker_is_replaced_and_acknowledged_turns_stay(
    tmp_path: Path, mock: MockServer, pg: StoreConfig, prefix: str, fresh: aiohttp.ClientSession
) -> None:
    async with serve_workers(2, tmp_path, mock.url, node_env(pg, REDIS_URL, prefix)) as workers:
        before = [await _one_turn(fresh, workers.url) for _ in range(8)]
        victim = workers.pids()[1]
        os.kill(victim, signal.SIGKILL)
        await workers.wait_line(LISTENING, 3)  # worker 1 listens again, another process
        after = [await _one_turn(fresh, workers.url) for _ in range(16)]
        replacement = workers.pids()[1]
        assert await workers.stop() == 0
        ran = workers.turns()
        rows = await pg_rows(pg, "SELECT turn_id FROM messages WHERE role = 'assistant' AND status = 'completed'")
    assert replacement != victim
    assert {row[0] for row in rows} >= set(before) | set(after)  # every acknowledged answer is stored
    assert replacement in {ran[t][0] for t in after}  # the new worker serves turns


async def test_a_killed_workers_run_is_taken_over_and_finishes(
    tmp_path: Path, mock_factory: Any, pg: StoreConfig, prefix: str, fresh: aiohttp.ClientSession
) -> None:
    """An agent run waits for a human on one worker; kill -9 of that worker. When its lease runs
    out another worker (the sibling, or the one started in its place) takes the run over from
    the journal; the answer then completes it."""
    tools: MockServer = await mock_factory(scenario="tools", ttft_ms=10, tps=1000, tokens=3)
    config = tmp_path / "runs.toml"
    config.write_text(
        '[coordination]\nrun_lease_s = 2.0\n[agents.ops]\ntools = ["run_command", "ask_human"]\n'
        "[agents.ops.command]\ntimeout_s = 10\n"
    )
    env = node_env(pg, REDIS_URL, prefix)
    async with serve_workers(2, tmp_path / "data", tools.url, env, ["--config", str(config)]) as workers:
        async with fresh.post(f"{workers.url}/v1/agents/ops/runs", json={"input": "job"}) as r:
            assert r.status == 202, await r.text()
            run_id = (await r.json())["run_id"]
        await eventually(lambda: _run_status(fresh, workers.url, run_id, "waiting_human"), 30, "the run to wait")
        victim = await _lease_pid(pg, run_id)
        assert victim in workers.pids().values()
        os.kill(victim, signal.SIGKILL)
        await eventually(lambda: _taken_over(pg, run_id, victim), 30, "another worker to take the run over")
        await eventually(lambda: _run_status(fresh, workers.url, run_id, "waiting_human"), 30, "the run to wait again")
        async with fresh.get(f"{workers.url}/v1/runs/{run_id}") as r:
            pending = (await r.json())["pending"]
        body = {"operation_id": pending["operation_id"], "answer": "yes"}
        async with fresh.post(f"{workers.url}/v1/runs/{run_id}/answer", json=body) as r:
            assert r.status == 200, await r.text()
        await eventually(lambda: _run_status(fresh, workers.url, run_id, "completed"), 30, "the run to complete")
        assert await workers.stop() == 0


async def test_sigint_drains_the_workers_and_exits_0(
    tmp_path: Path, mock_factory: Any, pg: StoreConfig, prefix: str, fresh: aiohttp.ClientSession
) -> None:
    slow: MockServer = await mock_factory(ttft_ms=1500, tps=200, tokens=3)
    async with serve_workers(2, tmp_path, slow.url, node_env(pg, REDIS_URL, prefix)) as workers:
        sid = await new_session(fresh, workers.url)
        turn = asyncio.create_task(turn_events(fresh, workers.url, sid, "drain me"))
        await slow.stats.wait_for(lambda s: s.requests == 1, what="the turn upstream")
        assert await workers.stop(signal.SIGINT) == 0
        events = await turn
    assert events[-1].name == "turn.completed"  # drained, not cut short
    assert workers.matching(re.compile(r"\[w[01] \d+\] stopped$")) != []


async def test_each_worker_has_its_own_port_for_its_metrics(
    tmp_path: Path, mock: MockServer, pg: StoreConfig, prefix: str, fresh: aiohttp.ClientSession
) -> None:
    """`server.worker_port_base`: worker k also listens on base + k. The shared port's /metrics
    is one worker's; the two own ports' counts add up to every turn served."""
    base = _free_ports(2)
    config = tmp_path / "workers.toml"
    config.write_text(f"[server]\nworker_port_base = {base}\n")
    env = node_env(pg, REDIS_URL, prefix)
    async with serve_workers(2, tmp_path / "data", mock.url, env, ["--config", str(config)]) as workers:
        for _ in range(6):
            await _one_turn(fresh, workers.url)
        counts = [await _completed(fresh, f"http://127.0.0.1:{base + k}") for k in (0, 1)]
        assert await workers.stop() == 0
    assert sum(counts) == 6


async def test_the_workers_drain_when_the_supervisor_is_killed(
    tmp_path: Path, mock: MockServer, pg: StoreConfig, prefix: str, fresh: aiohttp.ClientSession
) -> None:
    async with serve_workers(2, tmp_path, mock.url, node_env(pg, REDIS_URL, prefix)) as workers:
        await _one_turn(fresh, workers.url)
        workers.proc.send_signal(signal.SIGKILL)  # no forwarded signal: the workers see their stdin close
        await workers.wait_line(re.compile(r"\[w[01] \d+\] stopped$"), 2, timeout_s=30)


@pytest.mark.parametrize(
    ("args", "missing"),
    [((), "store.backend"), (("--store-backend", "postgres", "--postgres-url", "postgresql://x@127.0.0.1/x"), "redis")],
)
async def test_workers_without_postgres_and_redis_are_refused(
    tmp_path: Path, args: tuple[str, ...], missing: str
) -> None:
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "agentos", "serve", "--workers", "2", "--port", "0", "--data-dir", str(tmp_path)),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=child_env(),
    )
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    message = err.decode()
    assert proc.returncode == 2, message
    assert message.startswith("agentos: server.workers: 2 workers need the PostgreSQL store and Redis")
    assert missing in message and "Traceback" not in message and out == b""


async def _one_turn(http: aiohttp.ClientSession, url: str) -> str:
    """A turn in a new session, answered to the end: its id."""
    events = await turn_events(http, url, await new_session(http, url), "hello")
    assert events[-1].name == "turn.completed"
    turn_id: str = events[0].data["turn_id"]
    return turn_id


async def _completed(http: aiohttp.ClientSession, url: str) -> int:
    """Turns completed by the server at `url`, from its /metrics."""
    async with http.get(f"{url}/metrics") as r:
        assert r.status == 200
        text = await r.text()
    found = re.search(r'^agentos_turn_duration_ms_count\{outcome="completed"\} (\S+)$', text, re.M)
    return int(float(found[1])) if found else 0


def _free_ports(count: int) -> int:
    """The first of `count` consecutive loopback ports free now (a few tries: another process may
    take one in between; the test then fails to start, it does not pass wrongly)."""
    for _ in range(20):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            first = int(probe.getsockname()[1])
        if first + count <= 65536 and all(_free(first + k) for k in range(count)):
            return first
    raise AssertionError(f"no {count} consecutive free ports")


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


async def _run_status(http: aiohttp.ClientSession, url: str, run_id: str, status: str) -> bool:
    async with http.get(f"{url}/v1/runs/{run_id}") as r:
        return bool(r.status == 200 and (await r.json())["status"] == status)


async def _lease_pid(pg: StoreConfig, run_id: str) -> int:
    """The pid in the node id (`host-pid-random`) of the worker holding the run's lease."""
    [row] = await pg_rows(pg, "SELECT owner FROM run_leases WHERE run_id = $1", run_id)
    return int(str(row[0]).rsplit("-", 2)[1])


async def _taken_over(pg: StoreConfig, run_id: str, victim: int) -> bool:
    rows = await pg_rows(pg, "SELECT owner FROM run_leases WHERE run_id = $1", run_id)
    return bool(rows) and int(str(rows[0][0]).rsplit("-", 2)[1]) != victim
