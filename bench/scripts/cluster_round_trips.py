"""What one chat turn asks of PostgreSQL and Redis on the cluster path (issue 31), counted exactly.

One `agentos serve` node on the PostgreSQL store and Redis (`postgres-3node.toml`, a fresh schema
and key prefix), the mock provider in its own process, and TURNS turns (each on a session of its
own, CONCURRENCY at once). Around the turns: Redis's `INFO commandstats` (calls per command) and
PostgreSQL's `pg_stat_database` for the database (transactions, rows) and `pg_stat_statements`
when the server has it loaded; the difference divided by the turns. The node's idle work over the
same seconds (heartbeats, pollers) is counted too: an idle window of the same length is measured
first and reported beside it, so the per-turn share can be told from the background.

Only loopback services; the schema and the key prefix are removed afterwards.

    python bench/scripts/cluster_round_trips.py --turns 1000 --concurrency 100 \
        --out bench/results/<stamp>-<machine>-cluster-round-trips.md
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import redis.asyncio as aioredis
from local_processes import emit, free_port, start_mock, start_server, stop, wait_http

PROFILE = Path(__file__).resolve().parents[2] / "src/agentos_bench/profiles/postgres-3node.toml"
PG = "postgresql://postgres@127.0.0.1:5432/test"
REDIS = "redis://127.0.0.1:6379/0"
SSE = {"Accept": "text/event-stream"}


async def redis_calls(r: aioredis.Redis) -> Counter[str]:
    stats: dict[str, Any] = await r.info("commandstats")
    return Counter({name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()})


async def pg_counts(conn: asyncpg.Connection) -> Counter[str]:
    await conn.execute("SELECT pg_stat_clear_snapshot()")
    row = await conn.fetchrow(
        "SELECT xact_commit, xact_rollback, tup_inserted, tup_updated, tup_deleted, tup_returned, tup_fetched"
        " FROM pg_stat_database WHERE datname = current_database()"
    )
    assert row is not None
    return Counter(dict(row))


async def pg_statements(conn: asyncpg.Connection) -> Counter[str] | None:
    try:
        rows = await conn.fetch(
            "SELECT query, calls FROM pg_stat_statements WHERE dbid = "
            "(SELECT oid FROM pg_database WHERE datname = current_database())"
        )
    except asyncpg.PostgresError:
        return None  # the extension is not loaded (shared_preload_libraries): totals only
    return Counter({row["query"]: int(row["calls"]) for row in rows})


async def snapshot(r: aioredis.Redis, conn: asyncpg.Connection) -> tuple[Counter[str], Counter[str]]:
    await asyncio.sleep(1.0)  # PostgreSQL publishes a backend's counters at most once a second
    return await redis_calls(r), await pg_counts(conn)


async def one_turn(http: aiohttp.ClientSession, url: str) -> None:
    async with http.post(f"{url}/v1/sessions", json={}) as answer:
        assert answer.status == 201, await answer.text()
        session_id = (await answer.json())["id"]
    async with http.post(f"{url}/v1/sessions/{session_id}/turns", json={"input": "hello"}, headers=SSE) as answer:
        assert answer.status == 200, await answer.text()
        body = await answer.text()
        assert "turn.completed" in body, body[-400:]


async def turns(url: str, count: int, concurrency: int) -> float:
    gate = asyncio.Semaphore(concurrency)
    started = time.monotonic()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as http:

        async def bounded() -> None:
            async with gate:
                await one_turn(http, url)

        await asyncio.gather(*(bounded() for _ in range(count)))
    return time.monotonic() - started


def per(delta: Counter[str], n: int) -> dict[str, float]:
    return {k: v / n for k, v in sorted(delta.items(), key=lambda kv: -kv[1]) if v}


def start(args: argparse.Namespace, data: Path, schema: str, prefix: str) -> tuple[subprocess.Popen[bytes], ...]:
    """The mock and the node, each in its own process (before the loop: no blocking call in it)."""
    mock_port, port = free_port(), free_port()
    mock = start_mock(mock_port, "--ttft-ms", "20", "--tokens", "8")
    env = {**os.environ, "AGENTOS_STORE_POSTGRES_SCHEMA": schema, "AGENTOS_COORDINATION_KEY_PREFIX": prefix}
    with (data / "server.log").open("wb") as log:  # the child keeps its own descriptor
        server = start_server(PROFILE, port, mock_port, data, log, env)
    args.mock_port, args.port = mock_port, port
    return mock, server


async def measure(
    args: argparse.Namespace, mock: subprocess.Popen[bytes], server: subprocess.Popen[bytes], schema: str, prefix: str
) -> str:
    url = f"http://127.0.0.1:{args.port}"
    r = aioredis.from_url(REDIS)
    conn = await asyncpg.connect(PG)
    try:
        await wait_http(f"http://127.0.0.1:{args.mock_port}/v1/models", mock, "the mock")
        await wait_http(f"{url}/healthz", server, "the node")
        await turns(url, 20, 20)  # warm: connections, prepared statements, the first session rows
        statements_before = await pg_statements(conn)
        idle0 = await snapshot(r, conn)
        await asyncio.sleep(args.idle_secs)
        idle1 = await snapshot(r, conn)
        wall = await turns(url, args.turns, args.concurrency)
        busy1 = await snapshot(r, conn)
        statements_after = await pg_statements(conn)
    finally:
        server.terminate()
        await asyncio.to_thread(server.wait, 30)
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await conn.close()
        keys = [k async for k in r.scan_iter(match=f"{prefix}*")]
        if keys:
            await r.delete(*keys)
        await r.aclose()
    return render(args, wall, idle0, idle1, busy1, statements_before, statements_after)


def render(
    args: argparse.Namespace,
    wall: float,
    idle0: tuple[Counter[str], Counter[str]],
    idle1: tuple[Counter[str], Counter[str]],
    busy1: tuple[Counter[str], Counter[str]],
    statements_before: Counter[str] | None,
    statements_after: Counter[str] | None,
) -> str:
    idle_s = args.idle_secs + 1.0
    redis_idle = idle1[0] - idle0[0]
    redis_busy = busy1[0] - idle1[0]
    pg_idle = idle1[1] - idle0[1]
    pg_busy = busy1[1] - idle1[1]
    n = args.turns
    lines = [
        "# What one chat turn asks of PostgreSQL and Redis (one node, cluster path)",
        "",
        f"- Date (UTC): {time.strftime('%Y-%m-%d %H:%M', time.gmtime())}; machine: {os.cpu_count()} cores, "
        f"{platform.processor() or platform.machine()}; profile `postgres-3node.toml` on one node",
        f"- Command: `python bench/scripts/cluster_round_trips.py {' '.join(sys.argv[1:])}`",
        f"- {n} turns, each on a new session (the session's creation is in the count), {args.concurrency} at "
        f"once, mock TTFT 20 ms, 8 tokens; {wall:.1f} s of turns; an idle window of {idle_s:.0f} s measured before",
        "",
        "## Redis commands per turn (INFO commandstats; idle: calls per second with no traffic)",
        "",
        "| command | per turn | idle per s |",
        "|---|---|---|",
    ]
    idle_rate = {k: v / idle_s for k, v in redis_idle.items()}
    for name, value in per(redis_busy, n).items():
        lines.append(f"| {name} | {value:.2f} | {idle_rate.get(name, 0.0):.2f} |")
    lines.append(f"| **all** | **{sum(redis_busy.values()) / n:.2f}** | {sum(redis_idle.values()) / idle_s:.2f} |")
    lines += [
        "",
        "## PostgreSQL per turn (pg_stat_database, the whole database)",
        "",
        "| counter | per turn | idle per s |",
        "|---|---|---|",
    ]
    for name in (
        "xact_commit",
        "xact_rollback",
        "tup_inserted",
        "tup_updated",
        "tup_deleted",
        "tup_fetched",
        "tup_returned",
    ):
        lines.append(f"| {name} | {pg_busy[name] / n:.2f} | {pg_idle[name] / idle_s:.2f} |")
    if statements_before is not None and statements_after is not None:
        delta = statements_after - statements_before
        lines += [
            "",
            "## Statements per turn (pg_stat_statements, busy window and idle together)",
            "",
            "| calls per turn | statement |",
            "|---|---|",
        ]
        for query, calls in delta.most_common(25):
            lines.append(f"| {calls / n:.2f} | `{' '.join(query.split())[:140]}` |")
    else:
        lines += ["", "(pg_stat_statements is not loaded on this PostgreSQL: totals only.)"]
    return "\n".join(lines) + "\n"


def main(args: argparse.Namespace) -> None:
    tag = f"rt{random.randrange(1 << 30):x}"
    schema, prefix = f"agentos_bench_{tag}", f"agentos:bench:{tag}:"
    data = Path(tempfile.mkdtemp(prefix="round-trips-"))
    mock, server = start(args, data, schema, prefix)
    try:
        report = asyncio.run(measure(args, mock, server, schema, prefix))
    finally:
        stop(server, mock)
    emit(report, args.out)


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--idle-secs", type=float, default=10.0)
    parser.add_argument("--out", default="")
    return parser.parse_args()


if __name__ == "__main__":
    main(parse())
