"""The waiting point of `agentos bench runs`: the memory of runs parked on a human.

Method, on a fresh server (so the concurrent points' high-water memory does not hide the cost):
one throwaway run pays the one-time costs (fork server, journal, first model call); base sample;
then `waiting_runs` runs are started in `waiting_batches` equal batches, each batch at once. After
each batch the bench polls `GET /v1/runs/{id}` (bounded) until the batch waits for a human,
closes the batch's start connections (their buffers are not runs), settles and samples the tree.
Reported: (memory at the end − base) ÷ runs waiting, which also holds what the start bursts left
behind in CPython's arenas, and the least-squares slope of memory over the batch samples, the
marginal cost once those arenas exist. Then every run is answered, followed to its end (bounded;
the rest terminated), and the tree sampled once more.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from agentos_bench.common.http import bench_http_session
from agentos_bench.common.processes import Child
from agentos_bench.common.procfs import TreeSample, sample_tree
from agentos_bench.report.stats import slope
from agentos_bench.runs.client import RunTarget, answer_run, drive_run, start_run, terminate_run
from agentos_bench.runs.plan import RunsPlan
from agentos_bench.runs.probes import TERMINAL_STATUSES, mb, peak_sampling, poll_session, poll_until


def _settled(run: dict[str, Any]) -> bool:
    return run.get("status") in ("waiting_human", *TERMINAL_STATUSES)


def _ended(run: dict[str, Any]) -> bool:
    return run.get("status") in TERMINAL_STATUSES


def batch_sizes(runs: int, batches: int) -> list[int]:
    """`runs` split into `batches` near-equal sizes, larger first (`[334, 333, 333]`)."""
    batches = max(1, min(batches, runs))
    return [runs // batches + (1 if i < runs % batches else 0) for i in range(batches)]


def _mb_sample(sample: TreeSample, **extra: Any) -> dict[str, Any]:
    return {**extra, "rss_mb": mb(sample.rss_kb), "private_dirty_mb": mb(sample.private_dirty_kb)}


class _Parking:
    """The runs started so far, those waiting for a human, and a memory sample after each batch."""

    def __init__(self, plan: RunsPlan, server: Child) -> None:
        self.plan, self.server = plan, server
        self.target = RunTarget(server.url, agent=plan.agent)
        self.run_ids: list[str] = []
        self.waiting: dict[str, dict[str, Any]] = {}
        self.steps: list[dict[str, Any]] = []

    async def batch(self, size: int) -> None:
        async with bench_http_session() as http:  # closed before the sample: the burst's sockets are not runs
            started = await asyncio.gather(*(start_run(http, self.target) for _ in range(size)))
        new_ids = [run_id for run_id, _ in started if run_id is not None]
        self.run_ids += new_ids
        async with poll_session() as http:
            settled = await poll_until(http, self.server.url, new_ids, _settled, self.plan.waiting_timeout_s)
        self.waiting |= {r: run for r, run in settled.items() if run["status"] == "waiting_human"}
        await asyncio.sleep(self.plan.settle_s)
        self.steps.append(_mb_sample(sample_tree(self.server.pid), waiting=len(self.waiting)))

    async def release(self) -> dict[str, Any]:
        """Answer every waiting run, wait for all to end (bounded), terminate the rest."""
        url = self.server.url
        async with poll_session() as http:
            answers = [answer_run(http, url, r, str(run["pending"]["operation_id"])) for r, run in self.waiting.items()]
            answered = sum(await asyncio.gather(*answers))
            ended = await poll_until(http, url, self.run_ids, _ended, self.plan.waiting_timeout_s)
            left = [r for r in self.run_ids if r not in ended]
            await asyncio.gather(*(terminate_run(http, url, r) for r in left))
        await asyncio.sleep(self.plan.settle_s)
        statuses = Counter(str(run["status"]) for run in ended.values())
        after = _mb_sample(sample_tree(self.server.pid))
        return {"answered": answered, "statuses": dict(statuses), "terminated": len(left), "after_end": after}


async def measure_waiting(plan: RunsPlan, server: Child) -> dict[str, Any]:
    """Park `plan.waiting_runs` runs on a human in batches; return the waiting point of the report."""
    async with bench_http_session() as http:
        await drive_run(http, RunTarget(server.url, agent=plan.agent), answer_delay_s=0.0, timeout_s=30.0)
    await asyncio.sleep(plan.settle_s)
    base = sample_tree(server.pid)
    parking = _Parking(plan, server)
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with peak_sampling(server.pid) as sampler:
        for size in batch_sizes(plan.waiting_runs, plan.waiting_batches):
            await parking.batch(size)
        wait_s = loop.time() - started
    released = await parking.release()
    return waiting_row(plan.waiting_runs, parking, base=base, peak=sampler.peak, wait_s=wait_s, released=released)


def waiting_row(
    runs: int, parking: _Parking, *, base: TreeSample, peak: TreeSample, wait_s: float, released: dict[str, Any]
) -> dict[str, Any]:
    waiting, steps = len(parking.waiting), parking.steps
    end = steps[-1] if steps else _mb_sample(base)
    return {
        "runs": runs,
        "batches": len(steps),
        "started": len(parking.run_ids),
        "waiting_human": waiting,
        "seconds_to_all_waiting": round(wait_s, 2),
        "base_mb": {"rss": mb(base.rss_kb), "private_dirty": mb(base.private_dirty_kb)},
        "waiting_mb": {"rss": end["rss_mb"], "private_dirty": end["private_dirty_mb"]},
        "peak_mb": {"rss": mb(peak.rss_kb), "private_dirty": mb(peak.private_dirty_kb)},
        "per_waiting_run_kb": {
            "rss": _per_run_kb(end["rss_mb"], mb(base.rss_kb), waiting),
            "private_dirty": _per_run_kb(end["private_dirty_mb"], mb(base.private_dirty_kb), waiting),
        },
        "marginal_kb_per_waiting_run": {
            "rss": _slope_kb(steps, "rss_mb"),
            "private_dirty": _slope_kb(steps, "private_dirty_mb"),
        },
        "steps": steps,
        **released,
    }


def _per_run_kb(end_mb: float, base_mb: float, runs: int) -> float | None:
    return round((end_mb - base_mb) * 1024 / runs, 1) if runs else None


def _slope_kb(steps: list[dict[str, Any]], field_name: str) -> float | None:
    per_run = slope([float(s["waiting"]) for s in steps], [s[field_name] for s in steps])
    return None if per_run is None else round(per_run * 1024, 1)
