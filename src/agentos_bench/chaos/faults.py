"""The five faults, one at a time, each followed by its recovery, with what the nodes showed.

- `kill`: kill -9 of node 0, down for `hold_s` (past a run lease: its runs are taken over), then
  started again on its port.
- `postgres-restart`: the campaign's PostgreSQL stopped (fast shutdown) and started again after
  `pg_down_s`: how the nodes saw it (their outage start/end log lines, 503s) and how soon every
  node was ready again.
- `redis-stop`: the campaign's Redis stopped for `redis_down_s`, started again empty (no
  persistence): how soon each node logged "rate limits and quotas are cluster-wide again".
- `node-cut`: the last node's connections to PostgreSQL and Redis (through TCP proxies) dropped
  and refused for `hold_s` while the other nodes go on.
- `clock-step`: node 1's wall clock stepped `clock_step_s` ahead for `hold_s`, then back.

Each returns its figures; the campaign adds what every fault shares (statuses, the provider's
peak, the verdicts).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from agentos_bench.chaos.clients import Ledger
from agentos_bench.chaos.cluster import Cluster
from agentos_bench.chaos.services import Postgres, RedisServer

FAULTS = ("kill", "postgres-restart", "redis-stop", "node-cut", "clock-step")
PG_DOWN = "database unreachable since"
PG_UP = "database reachable again"
REDIS_DOWN = "coordination: Redis unreachable"
REDIS_UP = "coordination: Redis answers again"
_READY_LIMIT_S = 120.0


@dataclass(frozen=True, kw_only=True)
class FaultTimes:
    hold_s: float  # kill, node cut, clock step
    pg_down_s: float
    redis_down_s: float
    clock_step_s: float


@dataclass(kw_only=True)
class Context:
    cluster: Cluster
    postgres: Postgres
    redis: RedisServer
    ledger: Ledger
    http: aiohttp.ClientSession
    times: FaultTimes


async def kill(ctx: Context) -> dict[str, Any]:
    open_runs = sum(1 for r in ctx.ledger.runs.values() if r.end_seen is None and r.node == 0)
    await ctx.cluster.kill(0)
    await asyncio.sleep(ctx.times.hold_s)
    started = time.perf_counter()
    await ctx.cluster.restart(0)
    return {
        "killed_node": 0,
        "down_s": ctx.times.hold_s,
        "runs_started_on_it_and_open": open_runs,
        "restart_to_ready_s": round(time.perf_counter() - started, 2),
    }


async def postgres_restart(ctx: Context) -> dict[str, Any]:
    before = _counts(ctx.cluster, (PG_DOWN, PG_UP))
    await ctx.postgres.stop()
    await asyncio.sleep(ctx.times.pg_down_s)
    await ctx.postgres.start_again()
    back = time.perf_counter()
    ready_s = await _all_ready(ctx, back)
    lines = await _lines_after(ctx.cluster, before, (PG_DOWN, PG_UP), want=(PG_UP,))
    return {"down_s": ctx.times.pg_down_s, "all_nodes_ready_after_s": ready_s, **lines}


async def redis_stop(ctx: Context) -> dict[str, Any]:
    before = _counts(ctx.cluster, (REDIS_DOWN, REDIS_UP))
    held = await _permits_held(ctx)  # a node above its share keeps those streams once Redis is gone
    await ctx.redis.stop()
    await asyncio.sleep(ctx.times.redis_down_s)
    await ctx.redis.start_again()
    back = time.perf_counter()
    cluster_wide = await _each_logged(ctx.cluster, before, REDIS_UP, back)
    lines = await _lines_after(ctx.cluster, before, (REDIS_DOWN, REDIS_UP), want=(REDIS_UP,))
    return {
        "down_s": ctx.times.redis_down_s,
        "permits_held_at_the_stop": held,
        "cluster_wide_again_after_s": cluster_wide,
        **lines,
    }


async def node_cut(ctx: Context) -> dict[str, Any]:
    node = len(ctx.cluster.children) - 1
    patterns = (PG_DOWN, PG_UP, REDIS_DOWN, REDIS_UP)
    before = _counts(ctx.cluster, patterns)
    first = len(ctx.ledger.turns)
    await ctx.cluster.cut_off()
    await asyncio.sleep(ctx.times.hold_s)
    during = ctx.ledger.turns[first:]
    await ctx.cluster.reconnect()
    ready_s = await _all_ready(ctx, time.perf_counter())
    lines = await _lines_after(ctx.cluster, before, patterns, want=(PG_UP, REDIS_UP), nodes=(node,))
    others = sum(1 for t in during if t.node != node and t.outcome == "completed")
    own = sum(1 for t in during if t.node == node and t.outcome == "completed")
    return {
        "cut_node": node,
        "cut_s": ctx.times.hold_s,
        "turns_completed_on_the_others_during_the_cut": others,
        "turns_completed_on_the_cut_node_during_the_cut": own,
        "all_nodes_ready_after_s": ready_s,
        **lines,
    }


async def clock_step(ctx: Context) -> dict[str, Any]:
    first = len(ctx.ledger.turns)
    ctx.cluster.step_clock(1, ctx.times.clock_step_s)
    await asyncio.sleep(ctx.times.hold_s)
    ctx.cluster.step_clock(1, 0.0)
    own = sum(1 for t in ctx.ledger.turns[first:] if t.node == 1 and t.outcome == "completed")
    return {
        "stepped_node": 1,
        "step_s": ctx.times.clock_step_s,
        "held_s": ctx.times.hold_s,
        "turns_completed_on_it_while_stepped": own,
    }


INJECT: dict[str, Callable[[Context], Awaitable[dict[str, Any]]]] = {
    "kill": kill,
    "postgres-restart": postgres_restart,
    "redis-stop": redis_stop,
    "node-cut": node_cut,
    "clock-step": clock_step,
}


async def _permits_held(ctx: Context) -> list[int | None]:
    """Each node's `agentos_cluster_permits_held` (its streams holding a slot of the cluster's
    limit), read from its `/metrics`; None where it did not answer."""
    found: list[int | None] = []
    for url in ctx.cluster.urls:
        try:
            async with ctx.http.get(f"{url}/metrics", timeout=aiohttp.ClientTimeout(total=5)) as response:
                text = await response.text()
            line = next(x for x in text.splitlines() if x.startswith("agentos_cluster_permits_held "))
            found.append(int(float(line.split()[1])))
        except (aiohttp.ClientError, TimeoutError, StopIteration, ValueError):
            found.append(None)
    return found


async def _all_ready(ctx: Context, since: float) -> float | None:
    """Seconds from `since` until every node answers `/readyz` 200 (polled every 0.1 s)."""
    pending = set(ctx.cluster.urls)
    while pending and time.perf_counter() - since < _READY_LIMIT_S:
        for url in list(pending):
            try:
                async with ctx.http.get(f"{url}/readyz", timeout=aiohttp.ClientTimeout(total=2)) as response:
                    if response.status == 200:
                        pending.discard(url)
            except (aiohttp.ClientError, TimeoutError):
                pass
        if pending:
            await asyncio.sleep(0.1)
    return None if pending else round(time.perf_counter() - since, 2)


def outage_lines(cluster: Cluster) -> dict[tuple[int, str], int]:
    """Each node's outage start/end lines (PostgreSQL, Redis) so far."""
    return _counts(cluster, (PG_DOWN, PG_UP, REDIS_DOWN, REDIS_UP))


def lines_since(cluster: Cluster, before: dict[tuple[int, str], int]) -> dict[str, int]:
    """The outage lines each node logged since `before`, as `node<i>: <line>` (those that moved)."""
    now = outage_lines(cluster)
    return {
        f"node{node}: {line}": n - before.get((node, line), 0)
        for (node, line), n in now.items()
        if n != before.get((node, line), 0)
    }


def _counts(cluster: Cluster, patterns: tuple[str, ...]) -> dict[tuple[int, str], int]:
    """How many lines of each pattern each node's logs hold so far."""
    found: dict[tuple[int, str], int] = {}
    for node in range(len(cluster.children)):
        text = "".join(_read(path) for path in cluster.log_paths(node))
        found |= {(node, p): text.count(p) for p in patterns}
    return found


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


async def _each_logged(
    cluster: Cluster, before: dict[tuple[int, str], int], pattern: str, since: float
) -> list[float | None]:
    """Per node: seconds from `since` until its log shows one more `pattern` line (polled every 0.1 s)."""
    found: list[float | None] = [None] * len(cluster.children)
    while None in found and time.perf_counter() - since < _READY_LIMIT_S:
        now = _counts(cluster, (pattern,))
        for node in range(len(found)):
            if found[node] is None and now[(node, pattern)] > before[(node, pattern)]:
                found[node] = round(time.perf_counter() - since, 2)
        if None in found:
            await asyncio.sleep(0.1)
    return found


async def _lines_after(
    cluster: Cluster,
    before: dict[tuple[int, str], int],
    patterns: tuple[str, ...],
    *,
    want: tuple[str, ...],
    nodes: tuple[int, ...] | None = None,
) -> dict[str, Any]:
    """The new log lines of each pattern per node, once every node (of `nodes`) logged each of
    `want` (waited for up to 10 s: an end line comes with a node's first success)."""
    nodes = tuple(range(len(cluster.children))) if nodes is None else nodes
    deadline = time.perf_counter() + 10
    while True:
        now = _counts(cluster, patterns)
        done = all(now[(n, w)] > before[(n, w)] for n in nodes for w in want)
        if done or time.perf_counter() > deadline:
            break
        await asyncio.sleep(0.1)
    return {"log_lines": {f"node{n}": {p: now[(n, p)] - before[(n, p)] for p in patterns} for n in nodes}}
