"""Process-tree CPU and memory from Linux /proc (read-only, no signals, no psutil).

CPU is the delta of cumulative CPU time (utime + stime, plus cutime + cstime of reaped children),
never `ps %CPU`, which is a lifetime average. Memory is `Rss` and `Private_Dirty` from
`/proc/<pid>/smaps_rollup`, summed over the process and all its descendants.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

_PROC = Path("/proc")
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True, slots=True)
class TreeSample:
    cpu_s: float  # cumulative CPU seconds of the whole tree
    rss_kb: int
    private_dirty_kb: int
    processes: int


def parse_stat(text: str) -> tuple[int, float]:
    """(ppid, cumulative CPU seconds) from the text of /proc/<pid>/stat."""
    fields = text[text.rindex(")") + 2 :].split()
    # fields[0] is field 3 (state); ppid is field 4, utime..cstime are fields 14..17
    ticks = sum(int(f) for f in fields[11:15])
    return int(fields[1]), ticks / _CLOCK_TICKS


def parse_smaps_rollup(text: str) -> tuple[int, int]:
    """(Rss kB, Private_Dirty kB) from the text of /proc/<pid>/smaps_rollup."""
    rss = dirty = 0
    for line in text.splitlines():
        if line.startswith("Rss:"):
            rss = int(line.split()[1])
        elif line.startswith("Private_Dirty:"):
            dirty = int(line.split()[1])
    return rss, dirty


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None  # the process exited (or is not ours to read) between listing and reading


def all_stats() -> dict[int, tuple[int, float]]:
    stats: dict[int, tuple[int, float]] = {}
    for entry in _PROC.iterdir():
        if entry.name.isdigit() and (text := _read(entry / "stat")) is not None:
            stats[int(entry.name)] = parse_stat(text)
    return stats


def tree_pids(root: int, stats: dict[int, tuple[int, float]] | None = None) -> list[int]:
    """`root` and every descendant alive now."""
    stats = all_stats() if stats is None else stats
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    found, frontier = [], [root] if root in stats else []
    while frontier:
        pid = frontier.pop()
        found.append(pid)
        frontier.extend(children.get(pid, ()))
    return found


def sample_tree(root: int, memory: bool = True) -> TreeSample:
    """CPU and (optionally) memory of `root`'s process tree; zeros when it is gone."""
    return sample_trees([root], memory)


def sample_trees(roots: Sequence[int], memory: bool = True) -> TreeSample:
    """The sum over several process trees (the nodes of a cluster), from one read of /proc."""
    stats = all_stats()
    pids = sorted({pid for root in roots for pid in tree_pids(root, stats)})
    rss = dirty = 0
    if memory:
        for pid in pids:
            if (text := _read(_PROC / str(pid) / "smaps_rollup")) is not None:
                r, d = parse_smaps_rollup(text)
                rss, dirty = rss + r, dirty + d
    return TreeSample(sum(stats[p][1] for p in pids), rss, dirty, len(pids))


def roots_named(names: Collection[str]) -> list[int]:
    """The topmost processes named (comm) one of `names`: PostgreSQL's postmaster, not its
    backends (which are in its tree). Any user's: /proc/<pid>/stat is world-readable."""
    comm: dict[int, str] = {}
    parent: dict[int, int] = {}
    for entry in _PROC.iterdir():
        if entry.name.isdigit() and (text := _read(entry / "stat")) is not None:
            pid = int(entry.name)
            comm[pid] = text[text.find("(") + 1 : text.rfind(")")]
            parent[pid] = parse_stat(text)[0]
    return sorted(pid for pid, name in comm.items() if name in names and comm.get(parent[pid]) not in names)


def self_cpu_s() -> float:
    """Cumulative CPU seconds of this process."""
    times = os.times()
    return times.user + times.system
