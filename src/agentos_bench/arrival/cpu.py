"""CPU of each process of a load run, sampled once a second from /proc.

Per group, the cumulative CPU time (`agentos_bench.common.procfs`: utime + stime, with reaped
children) at each sample; the report uses differences over intervals, never `ps %CPU` (a
lifetime average that would smooth away the very saturation a burst is meant to cause).
Groups: the server process itself; its descendants (the fork server and the sandboxed commands,
reaped by the fork server); the mock provider's tree; this generator process.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from agentos.waiting import wait_event
from agentos_bench.common.procfs import all_stats, self_cpu_s, tree_pids

INTERVAL_S = 1.0
GROUPS = ("server", "sandboxes", "mock", "generator")


@dataclass(slots=True)
class CpuSamples:
    times_s: list[float] = field(default_factory=list)  # from the run's start
    cumulative: dict[str, list[float]] = field(default_factory=lambda: {g: [] for g in GROUPS})

    def add(self, t_s: float, values: dict[str, float]) -> None:
        self.times_s.append(t_s)
        for group in GROUPS:
            self.cumulative[group].append(values.get(group, 0.0))

    def cores(self, group: str, start_s: float, end_s: float) -> float | None:
        """Mean cores used by `group` between the first and last sample inside [start, end]."""
        inside = [i for i, t in enumerate(self.times_s) if start_s <= t <= end_s]
        if len(inside) < 2:
            return None
        first, last = inside[0], inside[-1]
        spent = self.cumulative[group][last] - self.cumulative[group][first]
        return spent / (self.times_s[last] - self.times_s[first])

    def peak_cores(self, group: str) -> float | None:
        """The most cores `group` used over one sampling interval."""
        values, times = self.cumulative[group], self.times_s
        rates = [(values[i] - values[i - 1]) / (times[i] - times[i - 1]) for i in range(1, len(times))
                 if times[i] > times[i - 1]]  # fmt: skip
        return max(rates) if rates else None


def read_groups(server_pid: int | None, mock_pid: int | None) -> dict[str, float]:
    stats = all_stats()
    found = {"generator": self_cpu_s()}
    if server_pid is not None and server_pid in stats:
        found["server"] = stats[server_pid][1]
        found["sandboxes"] = sum(stats[p][1] for p in tree_pids(server_pid, stats) if p != server_pid)
    if mock_pid is not None:
        found["mock"] = sum(stats[p][1] for p in tree_pids(mock_pid, stats))
    return found


async def sample_cpu(
    samples: CpuSamples, clock: Callable[[], float], pids: Sequence[int | None], stop: asyncio.Event
) -> None:
    """Add a sample every `INTERVAL_S` until `stop` is set (and one when it is)."""
    server_pid, mock_pid = pids
    while True:
        samples.add(clock(), await asyncio.to_thread(read_groups, server_pid, mock_pid))
        if stop.is_set():
            return
        await wait_event(stop, INTERVAL_S)
