"""Where a turn in flight keeps its memory (issue 31's RSS targets): the Python heap, by line.

One `agentos serve` (the `full-store` profile) started with tracemalloc on and a SIGUSR1 handler
that dumps a snapshot (a `sitecustomize` of this script's own, on the server's PYTHONPATH); the
mock provider holds every call before its first token (TTFT 60 s by default), so all the turns
stay in flight. A snapshot with nothing in flight (after a warm-up), then TURNS turns started at
once, a second snapshot once the mock holds them all, and the difference by source line divided by
the turns, beside the process's RSS and Private_Dirty growth over the same moments.

    python bench/scripts/turn_memory.py --turns 1000 --out bench/results/<stamp>-<machine>-turn-memory.md
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import aiohttp
from local_processes import emit, free_port, start_mock, start_server, stop

PROFILE = Path(__file__).resolve().parents[2] / "src/agentos_bench/profiles/full-store.toml"
SITECUSTOMIZE = """
import os, signal, tracemalloc
_dir = os.environ["TURN_MEMORY_SNAPSHOTS"]
tracemalloc.start(int(os.environ.get("TURN_MEMORY_FRAMES", "1")))
_count = [0]
def _dump(signum, frame):
    _count[0] += 1
    tracemalloc.take_snapshot().dump(os.path.join(_dir, f"snapshot{_count[0]}.bin"))
    open(os.path.join(_dir, f"done{_count[0]}"), "w").close()
signal.signal(signal.SIGUSR1, _dump)
"""


def memory_kb(pid: int) -> dict[str, int]:
    lines = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
    return {
        k: int(v.split()[0]) for k, v in (line.split(":", 1) for line in lines[1:]) if k in ("Rss", "Private_Dirty")
    }


async def wait_for(what: str, check: object, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await check():  # type: ignore[operator]
            return
        await asyncio.sleep(0.1)
    raise SystemExit(f"timed out waiting for {what}")


async def snapshot(pid: int, folder: Path, n: int) -> tracemalloc.Snapshot:
    os.kill(pid, signal.SIGUSR1)

    async def written() -> bool:
        return (folder / f"done{n}").exists()

    await wait_for(f"snapshot {n}", written)
    return await asyncio.to_thread(tracemalloc.Snapshot.load, str(folder / f"snapshot{n}.bin"))


async def measure(
    args: argparse.Namespace, server: subprocess.Popen[bytes], url: str, mock_url: str, folder: Path
) -> str:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:

        async def up() -> bool:
            try:
                async with http.get(f"{url}/healthz") as answer:
                    return answer.status == 200
            except aiohttp.ClientError:
                return False

        await wait_for("the server", up)
        sessions = []
        for _ in range(args.turns):
            async with http.post(f"{url}/v1/sessions", json={}) as answer:
                sessions.append((await answer.json())["id"])
        before = await snapshot(server.pid, folder, 1)
        rss0 = memory_kb(server.pid)

        async def turn(session_id: str) -> None:
            async with http.post(f"{url}/v1/sessions/{session_id}/turns", json={"input": "hello"}) as answer:
                await answer.read()

        tasks = [asyncio.create_task(turn(s)) for s in sessions]

        async def all_upstream() -> bool:
            async with http.get(mock_url.removesuffix("/v1") + "/stats") as answer:
                return bool(int((await answer.json())["in_flight"]) >= args.turns)

        await wait_for("every turn upstream", all_upstream, 120.0)
        await asyncio.sleep(1.0)  # the last turns' first writes
        rss1 = memory_kb(server.pid)
        during = await snapshot(server.pid, folder, 2)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return render(args, before, during, rss0, rss1)


def render(
    args: argparse.Namespace,
    before: tracemalloc.Snapshot,
    during: tracemalloc.Snapshot,
    rss0: dict[str, int],
    rss1: dict[str, int],
) -> str:
    n = args.turns
    keep = [tracemalloc.Filter(False, tracemalloc.__file__)]
    diffs = during.filter_traces(keep).compare_to(before.filter_traces(keep), "lineno")
    total = sum(d.size_diff for d in diffs)
    blocks = sum(d.count_diff for d in diffs)
    by_file: dict[str, int] = {}
    for d in diffs:
        name = d.traceback[0].filename
        name = name.split("site-packages/")[-1].split("/src/")[-1].split("lib/python3.11/")[-1]
        by_file[name] = by_file.get(name, 0) + d.size_diff
    lines = [
        "# Where a turn in flight keeps its memory (the server's Python heap)",
        "",
        f"- Date (UTC): {time.strftime('%Y-%m-%d %H:%M', time.gmtime())}; {os.cpu_count()} cores; "
        f"profile `full-store`; mock TTFT {args.ttft_ms} ms (every turn held before its first token)",
        f"- Command: `python bench/scripts/turn_memory.py {' '.join(sys.argv[1:])}`",
        f"- {n} turns in flight at once, each on its own session (the sessions made before the first snapshot)",
        "",
        f"**Per turn in flight: {total / n / 1024:.1f} KB on the Python heap ({blocks / n:.0f} blocks); RSS "
        f"{(rss1['Rss'] - rss0['Rss']) / n:.1f} KB, "
        f"Private_Dirty {(rss1['Private_Dirty'] - rss0['Private_Dirty']) / n:.1f} KB** "
        f"(RSS {rss0['Rss'] / 1024:.1f} -> {rss1['Rss'] / 1024:.1f} MB). Tracing itself costs memory: compare the"
        " Python heap's split, not its sum, with runs without it.",
        "",
        "## By file (KB per turn)",
        "",
        "| file | KB per turn |",
        "|---|---|",
    ]
    for name, size in sorted(by_file.items(), key=lambda kv: -kv[1])[: args.top]:
        lines.append(f"| `{name}` | {size / n / 1024:.2f} |")
    lines += ["", "## By line (bytes per turn)", "", "| line | bytes per turn | blocks per turn |", "|---|---|---|"]
    for d in diffs[: args.top]:
        frame = d.traceback[0]
        where = frame.filename.split("site-packages/")[-1].split("/src/")[-1].split("lib/python3.11/")[-1]
        lines.append(f"| `{where}:{frame.lineno}` | {d.size_diff / n:.0f} | {d.count_diff / n:.1f} |")
    return "\n".join(lines) + "\n"


def main(args: argparse.Namespace) -> None:
    folder = Path(tempfile.mkdtemp(prefix="turn-memory-"))
    (folder / "site").mkdir()
    (folder / "site" / "sitecustomize.py").write_text(SITECUSTOMIZE)
    mock_port, port = free_port(), free_port()
    mock = start_mock(mock_port, "--ttft-ms", str(args.ttft_ms))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(folder / "site"), os.environ.get("PYTHONPATH", "")]),
        "TURN_MEMORY_SNAPSHOTS": str(folder),
    }
    with (folder / "server.log").open("wb") as log:
        server = start_server(PROFILE, port, mock_port, folder / "data", log, env)
    try:
        report = asyncio.run(
            measure(args, server, f"http://127.0.0.1:{port}", f"http://127.0.0.1:{mock_port}/v1", folder)
        )
    finally:
        stop(server, mock)
    emit(report, args.out)


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--ttft-ms", type=float, default=60000.0)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--out", default="")
    return parser.parse_args()


if __name__ == "__main__":
    main(parse())
