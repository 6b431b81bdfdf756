"""/proc parsing (pure) and sampling this test's own process tree."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys

from agentos.testing import eventually
from agentos_bench.common.procfs import (
    parse_smaps_rollup,
    parse_stat,
    roots_named,
    sample_tree,
    sample_trees,
    tree_pids,
)

# field 2 (comm) may hold spaces and parentheses; utime..cstime = 100 200 30 40 ticks
STAT = "4242 (we (ird) name) S 17 4242 4242 0 -1 4194560 1 0 0 0 100 200 30 40 20 0 1 0 5 1000 50"
SMAPS = "55d0-7ffe ---p 00000000 00:00 0  [rollup]\nRss:  1024 kB\nPss:  900 kB\nPrivate_Dirty:  512 kB\n"


def test_parse_stat_reads_ppid_and_cpu() -> None:
    ppid, cpu_s = parse_stat(STAT)
    assert ppid == 17
    assert cpu_s == 370 / os.sysconf("SC_CLK_TCK")


def test_parse_smaps_rollup() -> None:
    assert parse_smaps_rollup(SMAPS) == (1024, 512)


def test_sample_own_process() -> None:
    sample = sample_tree(os.getpid())
    assert sample.rss_kb > 0 and sample.private_dirty_kb > 0
    assert sample.processes >= 1
    assert sample.cpu_s > 0


def test_gone_process_samples_as_zero() -> None:
    assert sample_tree(2**22 + 17).processes == 0


async def test_tree_includes_children() -> None:
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "import sys; sys.stdin.read()", stdin=asyncio.subprocess.PIPE
    )
    try:
        assert child.pid in tree_pids(os.getpid())
    finally:
        assert child.stdin is not None
        child.stdin.close()
        await child.wait()


async def test_several_trees_are_summed_and_each_process_counted_once() -> None:
    """The nodes of a cluster: two separate processes sum; a process named twice counts once."""
    children = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-c", "import sys; sys.stdin.read()", stdin=asyncio.subprocess.PIPE
        )
        for _ in range(2)
    ]
    try:
        one, both = sample_trees([children[0].pid]), sample_trees([c.pid for c in children])
        assert (one.processes, both.processes) == (1, 2)
        assert both.rss_kb > one.rss_kb > 0
        assert sample_trees([children[0].pid, children[0].pid]).processes == 1
        assert sample_trees([os.getpid(), children[1].pid]).processes == sample_tree(os.getpid()).processes
    finally:
        for child in children:
            assert child.stdin is not None
            child.stdin.close()
            await child.wait()


async def test_roots_named_finds_the_topmost_process_of_a_name_not_its_children() -> None:
    """As PostgreSQL's postmaster and its backends: the parent is the root, its children are in its tree."""
    shell = await asyncio.create_subprocess_exec("sh", "-c", "sleep 30; true", stdin=asyncio.subprocess.DEVNULL)
    try:
        await eventually(lambda: len(tree_pids(shell.pid)) == 2, what="sh started its sleep")
        (sleeper,) = set(tree_pids(shell.pid)) - {shell.pid}
        assert shell.pid in roots_named({"sh", "sleep"}) and sleeper not in roots_named({"sh", "sleep"})
        assert sleeper in roots_named({"sleep"})
    finally:
        for pid in tree_pids(shell.pid)[::-1]:  # the sleep, then the shell: only what this test started
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        await shell.wait()
