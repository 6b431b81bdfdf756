"""CPU pinning for a bench run: the server, the mock and the load generator each on cores of
their own (`agentos bench sweep --server-cpus 0-3 --mock-cpus 4 --loadgen-cpus 5`), so that
one does not take the others' time. Linux only (`taskset`, `os.sched_setaffinity`).

A CPU list is taskset's: `0-3,6` (cores 0, 1, 2, 3 and 6); empty: not pinned.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence

from agentos.errors import ConfigError


def parse_cpus(text: str) -> set[int]:
    """The cores of a CPU list (`0-3,6`); empty for "".

    Raises:
        ConfigError: not a CPU list, or a core this machine does not have.
    """
    cpus: set[int] = set()
    for part in filter(None, text.replace(" ", "").split(",")):
        low, _, high = part.partition("-")
        if not low.isdigit() or (high and not high.isdigit()):
            raise ConfigError(f"CPU list {text!r}: takes cores like 0-3,6")
        cpus.update(range(int(low), int(high or low) + 1))
    missing = cpus - os.sched_getaffinity(0)
    if missing:
        raise ConfigError(f"CPU list {text!r}: this process may not run on cores {sorted(missing)}")
    return cpus


def pinned(argv: Sequence[str], cpus: str) -> list[str]:
    """`argv` run on the cores `cpus` (through taskset, which execs it: the pid stays the
    program's, and its children inherit the cores); `argv` itself when `cpus` is empty."""
    if not cpus:
        return list(argv)
    taskset = shutil.which("taskset")
    if taskset is None:
        raise ConfigError("CPU pinning needs taskset (util-linux)")
    return [taskset, "-c", cpus, *argv]


def pin_self(cpus: str) -> None:
    """Run this process (the load generator) on the cores `cpus`; nothing when empty."""
    if cpus:
        os.sched_setaffinity(0, parse_cpus(cpus))
