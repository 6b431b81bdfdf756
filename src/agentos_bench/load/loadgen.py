"""The closed-loop load generator: N workers, each with its own session, turns back to back.

Usage (`bench_http_session` is in `agentos_bench.common.http`)::

    async with bench_http_session() as http:
        point = await run_point(ServerTarget(url), http, PointPlan(concurrency=8, warmup_s=2, duration_s=10))

Worker starts are spread over the first half of the warm-up, so a thousand workers do not send
their turns in lockstep (a synchronized burst every turn would measure the burst, not the server).
A point warms up for `warmup_s`, then measures for `duration_s`: every turn that *ends* inside the
window counts (successes give TTFT and turn time; failures are counted by kind). Workers start no
turn after the window closes; the turns still running finish (bounded by the turn timeout) but
are not counted, so nothing is cancelled mid-flight and no abort bleeds into the next point.

Several tenants in one point (`run_groups`): each group is a target (an Agent OS target with its
tenant's API key) with its own number of workers. The groups share the window, the stagger (their
workers interleave, so no tenant starts first) and the server's CPU and memory samples; each gets
its own result, so latency and turns/s are reported per tenant of the very same run.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from agentos.waiting import wait_tasks
from agentos_bench.common.procfs import TreeSample, sample_tree, sample_trees, self_cpu_s
from agentos_bench.load.targets import FAILURE_KINDS, Target, TurnSample, samples_of
from agentos_bench.report.stats import percentiles_ms

_FAILURE_PAUSE_S = 0.05  # after a non-429 failure, so a dead server is not hammered in a hot loop
_MAX_BACKOFF_S = 5.0
_SAMPLE_INTERVAL_S = 0.5
_MAX_STAGGER_S = 2.0  # worker starts are spread over min(warm-up / 2, this)


@dataclass(frozen=True, kw_only=True)
class PointPlan:
    concurrency: int
    warmup_s: float = 3.0
    duration_s: float = 15.0
    turn_timeout_s: float = 60.0


@dataclass(kw_only=True)
class PointResult:
    """One row of a sweep report (JSON-ready through `as_row`)."""

    target: str
    concurrency: int
    duration_s: float
    samples: list[TurnSample] = field(default_factory=list)
    outside: list[TurnSample] = field(default_factory=list)  # the turns that ended in the warm-up or after the window
    server: dict[str, float] = field(default_factory=dict)  # cpu and memory of the server tree
    mock_stats: dict[str, int] = field(default_factory=dict)
    mock_cpu_cores: float | None = None
    loadgen_cpu_cores: float | None = None
    services_cpu_s: float | None = None  # the shared services' (PostgreSQL, Redis) on this machine
    setup_failures: int = 0

    def as_row(self) -> dict[str, Any]:
        ok = [s for s in self.samples if s.ok]
        failures = Counter(s.failure for s in self.samples if s.failure)
        return {
            "target": self.target,
            "concurrency": self.concurrency,
            "duration_s": self.duration_s,
            "turns_ok": len(ok),
            "turns_per_s": round(len(ok) / self.duration_s, 2),
            "ttft_ms": percentiles_ms([s.ttft_s for s in ok if s.ttft_s is not None]),
            "turn_ms": percentiles_ms([s.turn_s for s in ok]),
            "failures": {kind: failures[kind] for kind in FAILURE_KINDS if failures[kind]},
            "failures_total": sum(failures.values()),
            "setup_failures": self.setup_failures,
            **self.server,
            "server_cpu_ms_per_turn": _per_turn_ms(self.server.get("server_cpu_s"), len(ok)),
            "mock_max_concurrent": self.mock_stats.get("max_concurrent"),
            "mock_aborted": self.mock_stats.get("aborted"),
            "mock_cpu_cores": _round(self.mock_cpu_cores),
            "loadgen_cpu_cores": _round(self.loadgen_cpu_cores),
            "services_cpu_cores": _round(
                None if self.services_cpu_s is None else self.services_cpu_s / self.duration_s
            ),
            "services_cpu_ms_per_turn": _per_turn_ms(self.services_cpu_s, len(ok)),
        }


def _per_turn_ms(cpu_s: float | None, turns: int) -> float | None:
    return None if cpu_s is None or not turns else round(cpu_s * 1000 / turns, 2)


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


@dataclass(kw_only=True)
class Probes:
    """Where CPU and memory come from: the server's pid (tree), the mock's pid, the mock's /stats URL.

    `server_pids`: several server processes (the nodes of a cluster), summed with `server_pid`'s.
    `service_pids`: the shared services' process trees (PostgreSQL, Redis), CPU only, apart."""

    server_pid: int | None = None
    mock_pid: int | None = None
    mock_base_url: str | None = None  # without /v1
    server_pids: tuple[int, ...] = ()
    service_pids: tuple[int, ...] = ()

    @property
    def servers(self) -> tuple[int, ...]:
        return (self.server_pid, *self.server_pids) if self.server_pid is not None else self.server_pids


@dataclass(frozen=True, slots=True)
class Group:
    """One tenant's share of a point: its target and its number of workers."""

    target: Target
    workers: int


WindowHook = Callable[[float, float], object]  # called with the window's start and end (loop time)


async def run_point(
    target: Target, http: aiohttp.ClientSession, plan: PointPlan, probes: Probes, on_window: WindowHook | None = None
) -> PointResult:
    """Run one concurrency point against `target` and return its measurements."""
    (result,) = await run_groups([Group(target, plan.concurrency)], http, plan, probes, on_window)
    return result


async def run_groups(
    groups: Sequence[Group],
    http: aiohttp.ClientSession,
    plan: PointPlan,
    probes: Probes,
    on_window: WindowHook | None = None,
) -> list[PointResult]:
    """Run every group's workers in one shared window; one result per group, in order.

    `plan.concurrency` is ignored: each group has its own `workers`. The server's CPU and memory
    (sampled once, for the whole server) go into every result. `on_window(start, end)` is called
    once the window is known, before the first worker starts (what a campaign times its events by)."""
    loop = asyncio.get_running_loop()
    await _mock_call(http, probes, "POST", "/stats/reset")
    opened = await asyncio.gather(*(_open(g.target, http) for g in groups for _ in range(g.workers)))
    window_start = loop.time() + plan.warmup_s
    window_end = window_start + plan.duration_s
    results = [PointResult(target=g.target.name, concurrency=g.workers, duration_s=plan.duration_s) for g in groups]
    live: list[tuple[Group, str | None, PointResult]] = []
    slots = iter(opened)
    for group, result in zip(groups, results, strict=True):
        mine = [next(slots) for _ in range(group.workers)]
        result.setup_failures = sum(1 for w in mine if isinstance(w, _SetupFailed))
        live += [(group, w, result) for w in mine if not isinstance(w, _SetupFailed)]
    live = _interleave(live)
    shared = results[0]
    if on_window is not None:
        on_window(window_start, window_end)
    sampler = asyncio.create_task(_sample_window(probes, window_start, window_end, shared))
    stagger_s = min(plan.warmup_s / 2, _MAX_STAGGER_S)
    loops = [
        _worker(g.target, http, w, plan, window_end, r.samples, delay_s=stagger_s * i / len(live))
        for i, (g, w, r) in enumerate(live)
    ]
    await _bounded_gather(loops, window_end + plan.turn_timeout_s + 5.0 - loop.time())
    await sampler
    mock_stats = await _mock_call(http, probes, "GET", "/stats")
    for result in results:
        result.outside = [s for s in result.samples if not window_start <= s.ended <= window_end]
        result.samples = [s for s in result.samples if window_start <= s.ended <= window_end]
        result.server, result.mock_stats = shared.server, mock_stats
        result.mock_cpu_cores, result.loadgen_cpu_cores = shared.mock_cpu_cores, shared.loadgen_cpu_cores
        result.services_cpu_s = shared.services_cpu_s
    await asyncio.gather(*(g.target.close_worker(http, w) for g, w, _ in live))
    return results


def _interleave(live: list[tuple[Group, str | None, PointResult]]) -> list[tuple[Group, str | None, PointResult]]:
    """Order the workers so each group's starts spread over the whole stagger (by rank within
    the group), instead of one group starting entirely before the next."""
    sizes = Counter(id(group) for group, _, _ in live)
    seen: Counter[int] = Counter()
    ranked = []
    for entry in live:
        key = id(entry[0])
        ranked.append((seen[key] / sizes[key], entry))
        seen[key] += 1
    return [entry for _, entry in sorted(ranked, key=lambda pair: pair[0])]


class _SetupFailed:
    pass


async def _open(target: Target, http: aiohttp.ClientSession) -> str | None | _SetupFailed:
    try:
        return await target.open_worker(http)
    except (aiohttp.ClientError, TimeoutError, RuntimeError):
        return _SetupFailed()


async def _worker(
    target: Target,
    http: aiohttp.ClientSession,
    worker: str | None,
    plan: PointPlan,
    window_end: float,
    samples: list[TurnSample],
    delay_s: float = 0.0,
) -> None:
    loop = asyncio.get_running_loop()
    await asyncio.sleep(delay_s)  # spread the first turns so the workers do not move in lockstep
    while loop.time() < window_end:
        several = samples_of(await target.turn(http, worker, plan.turn_timeout_s))
        samples.extend(several)
        pause = max(_pause_after(sample) for sample in several)
        if pause:
            await asyncio.sleep(min(pause, max(0.0, window_end - loop.time())))


def _pause_after(sample: TurnSample) -> float:
    if sample.failure == "429":
        return min(sample.retry_after_s or 1.0, _MAX_BACKOFF_S)
    return _FAILURE_PAUSE_S if sample.failure else 0.0


async def _bounded_gather(coroutines: Sequence[Awaitable[None]], timeout_s: float) -> None:
    await wait_tasks([asyncio.ensure_future(c) for c in coroutines], max(timeout_s, 0.1))


async def _sleep_until(deadline: float) -> None:
    delay = deadline - asyncio.get_running_loop().time()
    if delay > 0:
        await asyncio.sleep(delay)


async def _sample_window(probes: Probes, start: float, end: float, result: PointResult) -> None:
    """CPU as deltas over the window; server memory every half second (peak) and at the end."""
    await _sleep_until(start)
    sample = _tree_sampler(probes.servers)
    first, mock_first, self_first = sample(True), _cpu(probes.mock_pid), self_cpu_s()
    services = _tree_sampler(probes.service_pids)
    services_first = services(False)
    peak = latest = first
    loop = asyncio.get_running_loop()
    while loop.time() < end:
        await asyncio.sleep(min(_SAMPLE_INTERVAL_S, max(0.0, end - loop.time())))
        latest = sample(True)
        peak = _max_sample(peak, latest)
    duration = end - start
    result.loadgen_cpu_cores = (self_cpu_s() - self_first) / duration
    if mock_first is not None:
        result.mock_cpu_cores = ((_cpu(probes.mock_pid) or mock_first) - mock_first) / duration
    if first is not None and latest is not None and peak is not None:
        result.server = _server_row(first, latest, peak, duration)
    if services_first is not None and (services_last := services(False)) is not None:
        result.services_cpu_s = round(services_last.cpu_s - services_first.cpu_s, 2)


def _tree_sampler(pids: Sequence[int]) -> Callable[[bool], TreeSample | None]:
    def sample(memory: bool) -> TreeSample | None:
        return sample_trees(pids, memory=memory) if pids else None

    return sample


def _cpu(pid: int | None) -> float | None:
    return None if pid is None else sample_tree(pid, memory=False).cpu_s


def _max_sample(a: TreeSample | None, b: TreeSample | None) -> TreeSample | None:
    if a is None or b is None:
        return a or b
    return TreeSample(b.cpu_s, max(a.rss_kb, b.rss_kb), max(a.private_dirty_kb, b.private_dirty_kb), b.processes)


def _server_row(first: TreeSample, last: TreeSample, peak: TreeSample, duration_s: float) -> dict[str, float]:
    return {
        "server_cpu_s": round(last.cpu_s - first.cpu_s, 2),
        "server_cpu_cores": round((last.cpu_s - first.cpu_s) / duration_s, 3),
        "server_rss_mb_peak": round(peak.rss_kb / 1024, 1),
        "server_rss_mb_end": round(last.rss_kb / 1024, 1),
        "server_private_dirty_mb_peak": round(peak.private_dirty_kb / 1024, 1),
        "server_private_dirty_mb_end": round(last.private_dirty_kb / 1024, 1),
        "server_processes": last.processes,
    }


async def _mock_call(http: aiohttp.ClientSession, probes: Probes, method: str, path: str) -> dict[str, int]:
    if probes.mock_base_url is None:
        return {}
    try:
        async with http.request(method, f"{probes.mock_base_url}{path}", timeout=aiohttp.ClientTimeout(total=10)) as r:
            data: dict[str, int] = await r.json()
            return data
    except (aiohttp.ClientError, TimeoutError):
        return {}
