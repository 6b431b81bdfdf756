"""What the sandbox's mount namespace costs per `run_command`: with it and without, interleaved.

Runs `true` through the real sandbox (fork server, every layer this OS gives), in rounds: each
round runs 10 commands one at a time, then 20 at once, first with the strict sandbox, then with
the same sandbox less its mount namespace, so both see the same load. Reports per command the
wall time (one at a time: p50, p90; 20 at once: the median round's time / 20) and this process's
CPU time (the server's share: the confinement itself happens in the fork server's child). Then
times `_mountns.enter_root` alone in 100 forked children (needs root or a user namespace).

    PYTHONPATH=src .venv/bin/python bench/scripts/sandbox_cost.py --rounds 10
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import dataclasses
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

from agentos.agents import _mountns
from agentos.config import SandboxConfig
from agentos.config.agents import CommandLimits
from agentos.sandbox.sandbox import Sandbox

_CLONE_NEWNS, _CLONE_NEWPID = 0x00020000, 0x20000000


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def commands(rounds: int, base: Path) -> None:
    sandbox = Sandbox(SandboxConfig())
    strict = await sandbox.start()
    if "mount" not in strict.namespaces:
        sys.exit(f"no mount namespace on this OS: {strict.summary()}")
    configs = {"with": strict, "without": dataclasses.replace(strict, namespaces=("pid", "net"))}
    limits = CommandLimits(timeout_s=20)
    dirs = [base / f"w{i}" for i in range(20)]
    for workdir in dirs:
        await sandbox.run(["true"], workdir, limits)  # workspaces made, the fork server up
    alone: dict[str, list[float]] = {name: [] for name in configs}
    together: dict[str, list[float]] = {name: [] for name in configs}
    cpu: dict[str, float] = dict.fromkeys(configs, 0.0)
    for _ in range(rounds):
        for name, status in configs.items():
            sandbox._status = status  # the same sandbox, less one layer
            for _ in range(10):
                started = time.perf_counter()
                assert (await sandbox.run(["true"], dirs[0], limits)).exit_code == 0
                alone[name].append(time.perf_counter() - started)
            cpu_before, started = cpu_s(), time.perf_counter()
            results = await asyncio.gather(*(sandbox.run(["true"], d, limits) for d in dirs))
            assert all(r.exit_code == 0 for r in results)
            together[name].append((time.perf_counter() - started) / len(dirs))
            cpu[name] += cpu_s() - cpu_before
    await sandbox.close()
    for name in configs:
        times = sorted(alone[name])
        print(f"{name} a mount namespace: one at a time p50 {1000 * statistics.median(times):.1f} ms, "
              f"p90 {1000 * times[int(len(times) * 0.9)]:.1f} ms; 20 at once "
              f"{1000 * statistics.median(together[name]):.2f} ms/command; "
              f"server CPU {1000 * cpu[name] / (rounds * len(dirs)):.3f} ms/command")  # fmt: skip


def enter_root(workdir: Path, children: int = 100) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    times = []
    for _ in range(children):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # as the fork server's child does: unshare, then the PID namespace's init
            os.chdir(workdir)
            if libc.unshare(_CLONE_NEWNS | _CLONE_NEWPID) != 0:
                os._exit(1)  # never mount anything in the host's namespace
            if os.fork() == 0:
                started = time.perf_counter()
                _mountns.enter_root(str(workdir), 64, True)
                os.write(write, str(time.perf_counter() - started).encode())
                os._exit(0)
            os.wait()
            os._exit(0)
        os.close(write)
        times.append(float(os.read(read, 100) or "nan"))
        os.close(read)
        os.waitpid(pid, 0)
    times.sort()
    print(f"enter_root in the child: p50 {1000 * statistics.median(times):.2f} ms, "
          f"p90 {1000 * times[int(children * 0.9)]:.2f} ms ({children} children)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="sandbox-cost-") as base:
        os.chmod(base, 0o711)
        asyncio.run(commands(args.rounds, Path(base)))
        enter_root(Path(base) / "w0")


if __name__ == "__main__":
    main()
