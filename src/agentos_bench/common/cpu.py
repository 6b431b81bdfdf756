"""CPU of each process of a load run or a run campaign, sampled once a second from /proc.

Per group, the cumulative CPU time (`agentos_bench.common.procfs`: utime + stime, with reaped
children) at each sample; the report uses differences over intervals, never `ps %CPU` (a
lifetime average that would smooth away the very saturation a burst is meant to cause).
Groups: the server process itself; its descendants (the fork server and the sandboxed commands,
reaped by the fork server); the mock provider's tree; this generator process.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from agentos.waiting import wait_event
from agentos_bench.common.procfs import all_stats, self_cpu_s, tree_pids

INTERVAL_S = 1.0
GROUPS = ("server", "sandboxes", "mock", "generator")


@dataclass(slots=True)
class CpuSamples:
    """Cumulative CPU seconds per group at each sample. A deployment the bench did not start
    (`--server-url`) has other groups: one per node, read from its /metrics (`deployment.py`)."""

    groups: tuple[str, ...] = GROUPS
    times_s: list[float] = field(default_factory=list)  # from the run's start
    cumulative: dict[str, list[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.cumulative = {g: [] for g in self.groups}

    def add(self, t_s: float, values: dict[str, float]) -> None:
        """A group missing from `values` (a scrape that failed) keeps its last figure."""
        self.times_s.append(t_s)
        for group in self.groups:
            column = self.cumulative[group]
            column.append(values.get(group, column[-1] if column else 0.0))

    def cores(self, group: str, start_s: float, end_s: float) -> float | None:
        """Mean cores used by `group` between the first and last sample inside [start, end]."""
        inside = [i for i, t in enumerate(self.times_s) if start_s <= t <= end_s]
        if len(inside) < 2:
            return None
        first, last = inside[0], inside[-1]
        spent = self.cumulative[group][last] - self.cumulative[group][first]
        return spent / (self.times_s[last] - self.times_s[first])

    def mean_cores(self, group: str) -> float | None:
        """Mean cores used by `group` over every sample."""
        return self.cores(group, self.times_s[0], self.times_s[-1]) if self.times_s else None

    def peak_total_cores(self, exclude: tuple[str, ...] = ()) -> float | None:
        """The most cores the groups together (but `exclude`) used over one sampling interval
        (the peak of the sum: groups peaking at different moments do not add up)."""
        times, groups = self.times_s, [g for g in self.groups if g not in exclude]
        totals = [
            sum(self.cumulative[g][i] - self.cumulative[g][i - 1] for g in groups) / (times[i] - times[i - 1])
            for i in range(1, len(times))
            if times[i] > times[i - 1]
        ]
        return max(totals) if totals else None

    def peak_cores(self, group: str) -> float | None:
        """The most cores `group` used over one sampling interval."""
        values, times = self.cumulative[group], self.times_s
        rates = [
            (values[i] - values[i - 1]) / (times[i] - times[i - 1])
            for i in range(1, len(times))
            if times[i] > times[i - 1]
        ]
        return max(rates) if rates else None


def read_groups(
    server_pid: int | None, mock_pid: int | None, services: Mapping[str, Sequence[int]] | None = None
) -> dict[str, float]:
    """The CPU seconds of each group; `services`: more groups, each the process trees of its
    roots (PostgreSQL's and Redis's on this machine, `load.cluster.local_service_pids`)."""
    stats = all_stats()
    found = {"generator": self_cpu_s()}
    if server_pid is not None and server_pid in stats:
        found["server"] = stats[server_pid][1]
        found["sandboxes"] = sum(stats[p][1] for p in tree_pids(server_pid, stats) if p != server_pid)
    if mock_pid is not None:
        found["mock"] = sum(stats[p][1] for p in tree_pids(mock_pid, stats))
    for name, roots in (services or {}).items():
        found[name] = sum(stats[p][1] for root in roots for p in tree_pids(root, stats))
    return found


def local_reader(
    server_pid: int | None, mock_pid: int | None, services: Mapping[str, Sequence[int]] | None = None
) -> Reader:
    """The groups of processes this bench started (and `services`), from /proc, off the event loop."""

    async def read(t_s: float) -> dict[str, float]:
        return await asyncio.to_thread(read_groups, server_pid, mock_pid, services)

    return read


# reads the cumulative CPU seconds per group, at a time from the run's start
Reader = Callable[[float], Awaitable[dict[str, float]]]


async def sample_cpu(samples: CpuSamples, clock: Callable[[], float], read: Reader, stop: asyncio.Event) -> None:
    """Add a sample every `INTERVAL_S` until `stop` is set (and one when it is)."""
    while True:
        t_s = clock()
        samples.add(t_s, await read(t_s))
        if stop.is_set():
            return
        await wait_event(stop, INTERVAL_S)
