"""How long a burst of trigger deliveries takes to run at a tenant's `max_active_runs`, against
the floor that cap sets: N signed deliveries at once to one `agentos serve` whose tenant runs at
most K at a time (each run one mock call), timed from the first send until every delivery's run
has ended, beside one delivery alone (a run's own time). The floor is ceil(N / K) runs back to
back; what the dispatcher adds is the wait between a place freeing and the next start.

    python bench/scripts/trigger_backlog.py --deliveries 40 --cap 4 --rounds 3 --out <result file>

`PYTHONPATH=<worktree>/src` runs another commit's server with the same script (a before/after pair).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import aiohttp
from local_processes import emit, free_port, server_source, start_mock, start_server, stop, wait_http

from agentos_bench.arrival.webhook import secret_bytes, signed_headers

CONFIG = """\
[agents.echo]
tools = []
[tenant_limits]
max_active_runs = {cap}
"""
ENDED = {"completed", "failed", "cancelled"}


async def deliver(http: aiohttp.ClientSession, url: str, trigger: dict[str, str]) -> str:
    body = b'{"text": "go"}'
    headers = signed_headers(secret_bytes(trigger["secret"]), uuid.uuid4().hex, int(time.time()), body)
    async with http.post(f"{url}/v1/triggers/{trigger['trigger_id']}/events", data=body, headers=headers) as r:
        assert r.status == 202, await r.text()
        return str((await r.json())["run_id"])


async def ended(http: aiohttp.ClientSession, url: str, run_id: str, deadline: float) -> None:
    """Poll the run every 20 ms until it has ended (it exists once the dispatcher started it)."""
    while time.perf_counter() < deadline:
        async with http.get(f"{url}/v1/runs/{run_id}") as r:
            if r.status == 200 and (await r.json())["status"] in ENDED:
                return
        await asyncio.sleep(0.02)
    raise TimeoutError(f"run {run_id} did not end in time")


async def burst(http: aiohttp.ClientSession, url: str, trigger: dict[str, str], n: int) -> float:
    """Seconds from the first send until the runs of `n` deliveries sent at once have all ended."""
    started = time.perf_counter()
    run_ids = await asyncio.gather(*(deliver(http, url, trigger) for _ in range(n)))
    await asyncio.gather(*(ended(http, url, r, started + 120) for r in run_ids))
    return time.perf_counter() - started


async def measure(args: argparse.Namespace, url: str, server: subprocess.Popen[bytes]) -> list[tuple[float, float]]:
    """(one delivery alone, the burst) per round."""
    rows = []
    await wait_http(f"{url}/healthz", server, "the server")
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{url}/v1/triggers", json={"agent": "echo", "input_template": "{payload.text}"}) as r:
            assert r.status == 201, await r.text()
            trigger = await r.json()
        await burst(http, url, trigger, 1)  # warm: the agent's first run, the connections
        for _ in range(args.rounds):
            rows.append((await burst(http, url, trigger, 1), await burst(http, url, trigger, args.deliveries)))
    return rows


def main(args: argparse.Namespace) -> None:
    folder = Path(tempfile.mkdtemp(prefix="trigger-backlog-"))
    config = folder / "agentos.toml"
    config.write_text(CONFIG.format(cap=args.cap))
    mock_port, port = free_port(), free_port()
    mock = start_mock(mock_port, "--ttft-ms", str(args.ttft_ms), "--tokens", "2")
    with (folder / "server.log").open("wb") as log:
        server = start_server(config, port, mock_port, folder / "data", log)
    try:
        rows = asyncio.run(measure(args, f"http://127.0.0.1:{port}", server))
    finally:
        stop(server, mock)
    waves = math.ceil(args.deliveries / args.cap)
    source, commit = server_source()
    lines = [
        "# A burst of trigger deliveries at a tenant's max_active_runs",
        "",
        f"- Date (UTC): {time.strftime('%Y-%m-%d %H:%M', time.gmtime())}; {os.cpu_count()} cores;"
        f" server from `{source}` (commit {commit})",
        f"- Command: `python bench/scripts/trigger_backlog.py {' '.join(sys.argv[1:])}`",
        f"- {args.deliveries} deliveries at once, the tenant's `max_active_runs = {args.cap}`, mock"
        f" `--ttft-ms {args.ttft_ms} --tokens 2`; the floor is {waves} runs back to back",
        "",
        "| round | one run s | burst s | floor s (runs x one run) | burst / floor |",
        "|---|---|---|---|---|",
    ]
    for i, (one, whole) in enumerate(rows, 1):
        lines.append(f"| {i} | {one:.3f} | {whole:.2f} | {waves * one:.2f} | {whole / (waves * one):.2f} |")
    emit("\n".join(lines) + "\n", args.out)


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deliveries", type=int, default=40)
    parser.add_argument("--cap", type=int, default=4)
    parser.add_argument("--ttft-ms", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default="")
    return parser.parse_args()


if __name__ == "__main__":
    main(parse())
