"""What the sandbox adds to a burst of commands: N started at once, fresh, ready, and unconfined.

Issue 15's case: 100 runs reach a `run_command` together. Each round starts `--burst` commands
at once (the runs bench's own `sh -c "echo step-1 >> effects.log; echo one"`, each in a
workspace of its own) through the real sandbox, in three ways, interleaved so all see the same
machine:

- `fresh`: the strict sandbox, every command confined after its request (`ready_sandboxes = 0`);
- `ready`: the strict sandbox with `ready_sandboxes = --pool`, filled before each round;
- `unconfined`: the same fork server with no namespace, no Landlock and no identity: what
  starting the command costs without the sandbox, the reference "added" is measured from.

Per way: the latency of each command (the call to its result) p50 / p90 / p99 / max, and the
machine's CPU per command during the rounds (all processes: the server side here, the fork
server, the commands, the kernel's work for their namespaces), from /proc/stat. Needs root for
`ready` (it is skipped, saying why, otherwise). Writes a markdown and a JSON result.

    PYTHONPATH=src .venv/bin/python bench/scripts/sandbox_burst.py --burst 100 --rounds 10 --out-dir bench/results
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agentos.config import SandboxConfig
from agentos.config.agents import CommandLimits
from agentos.sandbox.sandbox import Sandbox
from agentos_bench.report.machine import git_commit, machine_info, result_stem, utc_now

COMMAND = ["sh", "-c", "echo step-1 >> effects.log; echo one"]
LIMITS = CommandLimits(timeout_s=30)


def busy_s() -> float:
    """CPU time the whole machine spent outside idle and iowait."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


@dataclasses.dataclass
class Way:
    name: str
    sandbox: Sandbox
    pool: int = 0
    latencies: list[float] = dataclasses.field(default_factory=list)
    cpu_s: float = 0.0
    from_ready: int = 0

    async def round(self, workdirs: list[Path]) -> None:
        before = self.sandbox.statistics().from_ready
        cpu = busy_s()
        started = time.perf_counter()

        async def one(workdir: Path) -> None:
            result = await self.sandbox.run(COMMAND, workdir, LIMITS)
            self.latencies.append(time.perf_counter() - started)
            if result.exit_code != 0:
                raise RuntimeError(f"{self.name}: {result}")

        await asyncio.gather(*(one(w) for w in workdirs))
        self.cpu_s += busy_s() - cpu
        self.from_ready += self.sandbox.statistics().from_ready - before

    def summary(self, commands: int) -> dict[str, Any]:
        times = sorted(self.latencies)

        def at(q: float) -> float:
            return round(1000 * times[min(len(times) - 1, int(q * len(times)))], 1)

        return {"way": self.name, "commands": len(times), "p50_ms": at(0.5), "p90_ms": at(0.9), "p99_ms": at(0.99),
                "max_ms": round(1000 * times[-1], 1), "cpu_ms_per_command": round(1000 * self.cpu_s / commands, 2),
                "from_ready": self.from_ready}  # fmt: skip


async def settle(ways: list[Way]) -> None:
    """Between rounds: every pool full again, and the kernel done tearing down the last
    round's namespaces (a network namespace is cleaned up by a kernel worker, after the command
    ended): no way's round pays for another's."""
    for way in ways:
        if way.pool:
            await asyncio.wait_for(way.sandbox.wait_ready(way.pool), 60)
    await asyncio.sleep(0.5)


async def measure(burst: int, rounds: int, pool: int, base: Path) -> list[dict[str, Any]]:
    fresh = Sandbox(SandboxConfig())
    strict = await fresh.start()
    if strict.mode != "strict":
        sys.exit(f"not the strict sandbox here: {strict.summary()}")
    ways = [Way("fresh", fresh)]
    if strict.identity == "setuid":
        ready = Sandbox(SandboxConfig(ready_sandboxes=pool))
        await ready.start()
        ways.append(Way("ready", ready, pool))
    else:
        print("ready: skipped (ready sandboxes need the server to run as root)")
    unconfined = Sandbox(SandboxConfig())
    await unconfined.start()
    unconfined._status = dataclasses.replace(strict, namespaces=(), landlock=False, identity=None)  # the reference
    ways.append(Way("unconfined", unconfined))
    workdirs = [base / f"w{i}" for i in range(burst)]
    for way in ways:  # workspaces made and handed to their identities once, outside the rounds
        await asyncio.gather(*(way.sandbox.run(["true"], w, LIMITS) for w in workdirs))
    for _ in range(rounds):
        for way in ways:
            await settle(ways)
            await way.round(workdirs)
    for way in ways:
        await way.sandbox.close()
    return [way.summary(burst * rounds) for way in ways]


def report(args: argparse.Namespace, rows: list[dict[str, Any]], load: float) -> str:
    unconfined = next(r for r in rows if r["way"] == "unconfined")
    lines = [
        f"# The sandbox under a burst of {args.burst} commands at once",
        "",
        f"- Command: `PYTHONPATH=src .venv/bin/python bench/scripts/{Path(__file__).name} "
        f"{shlex.join(sys.argv[1:])}` (commit {git_commit()}, load average {load:.1f} before)",
        f"- Machine: {json.dumps(machine_info())}",
        f"- Each round: {args.burst} × `{shlex.join(COMMAND)}` at once, each in its own workspace; "
        f"{args.rounds} rounds, the ways interleaved; `ready` kept {args.pool} ready sandboxes, filled before "
        "each round. Latency: the call to its result. CPU: the whole machine during the rounds, per command.",
        "",
        "| way | p50 ms | p90 ms | p99 ms | max ms | CPU ms/command | added p50 / p99 ms | from ready |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        added = f"{r['p50_ms'] - unconfined['p50_ms']:+.1f} / {r['p99_ms'] - unconfined['p99_ms']:+.1f}"
        lines.append(f"| {r['way']} | {r['p50_ms']} | {r['p90_ms']} | {r['p99_ms']} | {r['max_ms']} | "
                     f"{r['cpu_ms_per_command']} | {added} | {r['from_ready']} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--burst", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--pool", type=int, default=128, help="ready sandboxes for the `ready` way")
    parser.add_argument("--name", default=None)
    parser.add_argument("--out-dir", type=Path, default=None)
    args = parser.parse_args()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="sandbox-burst-") as base:
        os.chmod(base, 0o711)
        rows = asyncio.run(measure(args.burst, args.rounds, args.pool, Path(base)))
    text = report(args, rows, load)
    print(text)
    if args.out_dir is not None:
        stem = result_stem("sandbox-burst", f"b{args.burst}", machine_info(), utc_now(), args.name)
        (args.out_dir / f"{stem}.md").write_text(text)
        document = {"args": vars(args) | {"out_dir": str(args.out_dir)}, "rows": rows, "load_before": load}
        (args.out_dir / f"{stem}.json").write_text(json.dumps(document, indent=1))
        print(f"wrote {args.out_dir / stem}.md and .json")


if __name__ == "__main__":
    main()
