"""What the schedules' scheduler costs while fires wait for a tenant's place: one `agentos serve`
whose tenant runs one run at a time (`max_active_runs = 1`), the mock holding that run's answer
for minutes, and S schedules firing every second (or `--every-s`; `overlap = "queue"`, room for 10 runs each in
flight, so each fire asks the tenant's cap and is refused); after the queues fill, the server's
CPU over a window, beside the same server with no schedule.

    python bench/scripts/scheduler_at_cap.py --schedules 5 --window-secs 20 --out <result file>
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from local_processes import emit, free_port, server_source, start_mock, start_server, stop, wait_http

CONFIG = """\
[agents.ops]
tools = []
[tenant_limits]
max_active_runs = 1
"""


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of `pid` (/proc, Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def measure(args: argparse.Namespace, url: str, server: subprocess.Popen[bytes], schedules: int) -> float:
    """CPU ms per second of the server over the window, after `args.fill_secs` of fires piling up."""
    await wait_http(f"{url}/healthz", server, "the server")
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{url}/v1/agents/ops/runs", json={"input": "hold the place"}) as r:
            assert r.status == 202, await r.text()  # the tenant's one place, held for minutes
        body = {"agent": "ops", "input": "tick", "every_s": args.every_s, "overlap": "queue", "max_runs_in_flight": 10}
        for _ in range(schedules):
            async with http.post(f"{url}/v1/schedules", json=body) as r:
                assert r.status == 201, await r.text()
    await asyncio.sleep(args.fill_secs)  # the queues fill (10 pending fires per schedule at most)
    before, began = cpu_s(server.pid), time.monotonic()
    await asyncio.sleep(args.window_secs)
    return 1000 * (cpu_s(server.pid) - before) / (time.monotonic() - began)


def one(args: argparse.Namespace, schedules: int) -> float:
    folder = Path(tempfile.mkdtemp(prefix="scheduler-at-cap-"))
    config = folder / "agentos.toml"
    config.write_text(CONFIG)
    mock_port, port = free_port(), free_port()
    mock = start_mock(mock_port, "--ttft-ms", "600000")
    with (folder / "server.log").open("wb") as log:
        server = start_server(config, port, mock_port, folder / "data", log)
    try:
        return asyncio.run(measure(args, f"http://127.0.0.1:{port}", server, schedules))
    finally:
        stop(server, mock, wait_s=90)


def main(args: argparse.Namespace) -> None:
    rows = []
    for i in range(args.rounds):
        rows.append((i + 1, one(args, 0), one(args, args.schedules)))
    _, commit = server_source()
    lines = [
        "# The scheduler while fires wait for a tenant's place",
        "",
        f"- Date (UTC): {time.strftime('%Y-%m-%d %H:%M', time.gmtime())}; {os.cpu_count()} cores; server at {commit}",
        f"- Command: `python bench/scripts/scheduler_at_cap.py {' '.join(sys.argv[1:])}`",
        f"- `max_active_runs = 1`, held by one run for the whole window; {args.schedules} schedules every"
        f" {args.every_s} s,"
        f' `overlap = "queue"`, `max_runs_in_flight = 10`; {args.fill_secs} s to fill,'
        f" then {args.window_secs} s measured",
        "",
        "| round | server CPU ms/s, no schedule | with the schedules waiting |",
        "|---|---|---|",
    ]
    lines += [f"| {i} | {idle:.1f} | {busy:.1f} |" for i, idle, busy in rows]
    emit("\n".join(lines) + "\n", args.out)


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", type=int, default=5)
    parser.add_argument("--every-s", type=int, default=1, help="each schedule's period")
    parser.add_argument("--fill-secs", type=float, default=15.0)
    parser.add_argument("--window-secs", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default="")
    return parser.parse_args()


if __name__ == "__main__":
    main(parse())
