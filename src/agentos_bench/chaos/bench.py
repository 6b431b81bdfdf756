"""`agentos bench faults --cluster`: the cluster chaos campaign (issue #26).

N nodes (`agentos serve`) on the campaign's own PostgreSQL and Redis (never the shared ones: it
stops and restarts them), one mock provider with a long first-token time so that the provider,
not the CPU, sets the pace; `users` chat users and `runs` agent runs (the `tools` scenario: two
commands, a human question, the answer) spread over the nodes. After a warm-up the faults come
one at a time (`agentos_bench.chaos.faults`), each followed by its recovery and `settle_s` of load;
then the users stop, the runs left are followed to their ends (at most `drain_s`), and what the
clients saw is compared with what the cluster kept (`agentos_bench.chaos.verify`).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp

from agentos.mock.server import MockSettings
from agentos.waiting import wait_tasks
from agentos_bench.chaos.clients import TURN_TIMEOUT_S, Ledger, run_loop, user_loop
from agentos_bench.chaos.cluster import Cluster, ClusterSetup, chaos_cluster
from agentos_bench.chaos.faults import FAULTS, INJECT, Context, FaultTimes, lines_since, outage_lines
from agentos_bench.chaos.services import Postgres, RedisServer, services_problem
from agentos_bench.chaos.summary import phase_summary
from agentos_bench.chaos.verdicts import fault_verdicts
from agentos_bench.chaos.verify import verify
from agentos_bench.common.mock_process import start_mock_process
from agentos_bench.common.processes import stop_child

AGENT = "chaos"


@dataclass(frozen=True, kw_only=True)
class ChaosPlan:
    nodes: int = 3
    users: int = 300
    runs: int = 100
    faults: tuple[str, ...] = FAULTS
    provider_limit: int = 300  # kernel.concurrency_limit, the cluster's
    ttft_ms: float = 4000.0
    warmup_s: float = 20.0
    settle_s: float = 20.0  # load after each recovery, before the next fault
    drain_s: float = 120.0
    run_lease_s: float = 15.0
    permit_lease_s: float = 10.0
    times: FaultTimes = FaultTimes(hold_s=30.0, pg_down_s=5.0, redis_down_s=30.0, clock_step_s=3600.0)

    def profile(self) -> str:
        kernel = f"[kernel]\nconcurrency_limit = {self.provider_limit}\n"
        leases = f"run_lease_s = {self.run_lease_s}\npermit_lease_s = {self.permit_lease_s}\n"
        return f'[store]\nbackend = "postgres"\n\n{kernel}\n[coordination]\n{leases}'


async def run_chaos(plan: ChaosPlan, work_dir: Path) -> dict[str, Any]:
    """The campaign's figures and verdicts; every fault skipped (with the reason) where the
    campaign cannot run its own PostgreSQL and Redis."""
    head = {"plan": _plan_fields(plan)}
    if problem := services_problem():
        return head | {"skipped": {fault: problem for fault in plan.faults}, "verdict": {}}
    notes: list[str] = []
    async with _services(plan, work_dir, notes) as (cluster, postgres, redis):
        found = await _campaign(plan, cluster, postgres, redis)
    return head | found | {"notes": notes}


@contextlib.asynccontextmanager
async def _services(
    plan: ChaosPlan, work_dir: Path, notes: list[str]
) -> AsyncIterator[tuple[Cluster, Postgres, RedisServer]]:
    profile = _write_profile(plan, work_dir)
    mock = await start_mock_process(
        MockSettings(ttft_ms=plan.ttft_ms, tps=100.0, tokens=10, scenario="tools"), work_dir
    )
    postgres = redis = None
    try:
        postgres = await Postgres.start(work_dir)
        redis = await RedisServer.start(work_dir)
        setup = ClusterSetup(nodes=plan.nodes, profile=profile, provider_url=mock.url, postgres=postgres, redis=redis)
        async with chaos_cluster(setup, work_dir, notes) as cluster:
            yield cluster, postgres, redis
    finally:
        if redis is not None:
            await redis.stop()
        if postgres is not None:
            await postgres.close()
        await stop_child(mock.process)


async def _campaign(plan: ChaosPlan, cluster: Cluster, postgres: Postgres, redis: RedisServer) -> dict[str, Any]:
    ledger, stop = Ledger(), asyncio.Event()
    faults: dict[str, dict[str, Any]] = {}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        await _create_agent(http, cluster.urls[0])
        urls = cluster.urls  # the same list object: a restarted node keeps its port
        users = [asyncio.create_task(user_loop(http, urls, ledger, stop, n)) for n in range(plan.users)]
        runs = [asyncio.create_task(run_loop(http, urls, AGENT, ledger, stop, n)) for n in range(plan.runs)]
        ctx = Context(cluster=cluster, postgres=postgres, redis=redis, ledger=ledger, http=http, times=plan.times)
        try:
            await asyncio.sleep(plan.warmup_s)
            for fault in plan.faults:
                faults[fault] = await _one_fault(fault, ctx, plan)
        finally:
            ledger.enter("drain")
            await _stop(users, runs, stop, plan.drain_s)
        found = await verify(
            http, cluster.urls[0], ledger, [cluster.log_dir / f"data-node{n}" for n in range(plan.nodes)]
        )
    phases = phase_summary(ledger, found)
    for fault, figures in faults.items():
        figures["clients"] = phases.get(fault, {})
    unfinished = sorted(found.get("unfinished", {}))
    return {
        "warm_up": phases.get("warm-up", {}),
        "faults": faults,
        "drain": phases.get("drain", {}),
        "unfinished_runs": unfinished,
        "verdict": fault_verdicts(faults, plan.provider_limit, plan.nodes),
    }


async def _one_fault(fault: str, ctx: Context, plan: ChaosPlan) -> dict[str, Any]:
    ctx.ledger.enter(fault)
    await _mock(ctx.http, ctx.cluster.setup.provider_url, "reset")
    lines_before = outage_lines(ctx.cluster)
    over: list[float] = []  # seconds since the fault began of each sample above the limit
    sampler = asyncio.create_task(_sample(ctx.http, ctx.cluster.setup.provider_url, plan.provider_limit, over))
    try:
        figures = await INJECT[fault](ctx)
        await asyncio.sleep(plan.settle_s)
    finally:
        sampler.cancel()
        await asyncio.gather(sampler, return_exceptions=True)
    stats = await _mock(ctx.http, ctx.cluster.setup.provider_url, "")
    when = f"{over[0]:.1f}-{over[-1]:.1f} s after the fault began ({len(over)} samples)" if over else None
    return figures | {
        "provider_peak_streams": stats.get("max_concurrent"),
        "provider_over_limit": when,
        "outage_lines_over_the_phase": lines_since(ctx.cluster, lines_before),
    }


async def _sample(http: aiohttp.ClientSession, v1_url: str, limit: int, over: list[float]) -> None:
    """Every 0.25 s until cancelled: when the provider's streams in flight were above `limit`
    (the peak alone does not say whether it came with the fault or later)."""
    began = time.perf_counter()
    while True:
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            if (await _mock(http, v1_url, "")).get("in_flight", 0) > limit:
                over.append(time.perf_counter() - began)
        await asyncio.sleep(0.25)


async def _mock(http: aiohttp.ClientSession, v1_url: str, what: str) -> dict[str, Any]:
    base = v1_url.removesuffix("/v1")
    method = http.post if what == "reset" else http.get
    async with method(f"{base}/stats{'/reset' if what else ''}") as response:
        body: dict[str, Any] = await response.json()
        return body


async def _stop(
    users: list[asyncio.Task[None]], runs: list[asyncio.Task[None]], stop: asyncio.Event, drain_s: float
) -> None:
    """Stop the users (their last turns end) and the runs' starts; follow the runs left to their
    ends for at most `drain_s` (then their followers are cancelled: the read-back judges them)."""
    stop.set()
    await wait_tasks(users, TURN_TIMEOUT_S + 10)
    await wait_tasks(runs, drain_s)


async def _create_agent(http: aiohttp.ClientSession, url: str) -> None:
    async with http.post(f"{url}/v1/agents", json={"name": AGENT}) as response:
        if response.status not in (200, 201):
            raise RuntimeError(f"POST /v1/agents: {response.status} {await response.text()}")


def _write_profile(plan: ChaosPlan, work_dir: Path) -> Path:
    """The nodes' profile (small, local: written before the load starts)."""
    work_dir.mkdir(parents=True, exist_ok=True)
    profile = work_dir / "server.toml"
    profile.write_text(plan.profile())
    return profile


def _plan_fields(plan: ChaosPlan) -> dict[str, Any]:
    fields = asdict(plan)
    fields["faults"] = list(plan.faults)
    fields["provider_share_per_node"] = math.ceil(plan.provider_limit / plan.nodes)
    return fields
