"""What the runs bench watches besides the runs: the server tree's memory peak, its main process's
CPU, and bounded polling of run statuses.

Usage::

    async with peak_sampling(server_pid) as sampler:
        ...                                   # the load
    sampler.peak.rss_kb                       # includes one last sample taken at the exit
    runs = await poll_until(http, base_url, run_ids, lambda run: run["status"] == "waiting_human", 60.0)
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp

from agentos_bench.common.procfs import TreeSample, sample_tree
from agentos_bench.runs.client import get_run

TERMINAL_STATUSES = ("completed", "failed", "cancelled")
_SAMPLE_INTERVAL_S = 0.5
_POLL_INTERVAL_S = 0.5
_POLL_CONNECTIONS = 32
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def mb(kb: int) -> float:
    return round(kb / 1024, 1)


def own_cpu_s(pid: int) -> float:
    """utime + stime of one process, all its threads, without its children (0.0 when it is gone).

    For the server this is its event loop plus its writer threads: the part bound to one process,
    apart from the sandbox fork server and the commands it runs.
    """
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = text[text.rindex(")") + 2 :].split()  # fields[0] is field 3; utime, stime are 14, 15
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


class PeakSampler:
    """The peak memory of a process tree, sampled every 0.5 s off the event loop."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = TreeSample(0.0, 0, 0, 0)

    def take(self, sample: TreeSample) -> None:
        self.peak = TreeSample(
            sample.cpu_s,
            max(self.peak.rss_kb, sample.rss_kb),
            max(self.peak.private_dirty_kb, sample.private_dirty_kb),
            max(self.peak.processes, sample.processes),
        )

    async def run(self) -> None:
        while True:
            self.take(await asyncio.to_thread(sample_tree, self.pid))
            await asyncio.sleep(_SAMPLE_INTERVAL_S)


@asynccontextmanager
async def peak_sampling(pid: int) -> AsyncIterator[PeakSampler]:
    sampler = PeakSampler(pid)
    task = asyncio.create_task(sampler.run())
    try:
        yield sampler
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        sampler.take(await asyncio.to_thread(sample_tree, pid))


@asynccontextmanager
async def poll_session() -> AsyncIterator[aiohttp.ClientSession]:
    """A small client for polling: few connections, so it adds little to the server's memory."""
    connector = aiohttp.TCPConnector(limit=_POLL_CONNECTIONS)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=30)) as http:
        yield http


async def poll_until(
    http: aiohttp.ClientSession,
    base_url: str,
    run_ids: Sequence[str],
    done: Callable[[dict[str, Any]], bool],
    timeout_s: float,
) -> dict[str, dict[str, Any]]:
    """Poll `GET /v1/runs/{id}` of the runs not yet `done` until all are, or `timeout_s` passes.

    Returns the last JSON seen of every run that is `done`, by run id.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    finished: dict[str, dict[str, Any]] = {}
    while len(finished) < len(run_ids) and loop.time() < deadline:
        pending = [r for r in run_ids if r not in finished]
        for run in await asyncio.gather(*(get_run(http, base_url, r) for r in pending)):
            if run is not None and done(run):
                finished[str(run["run_id"])] = run
        if len(finished) < len(run_ids):
            await asyncio.sleep(_POLL_INTERVAL_S)
    return finished
