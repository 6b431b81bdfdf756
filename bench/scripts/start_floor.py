"""What 100 run starts at once cost against the same burst of requests with no run behind them
(issue 31's start-call target): bursts of N `POST /v1/agents/{name}/runs` at once, beside bursts
of N `POST /v1/agents/nosuch/runs` (a 404 after auth and the body: the request path alone) and N
`GET /healthz`, from one client over warmed connections, on one `agentos serve` (the `runs`
profile, the mock's `tools` scenario). Bursts a few seconds apart; the first start burst meets an
idle server, later ones meet the runs of the earlier bursts at work.

    python bench/scripts/start_floor.py --burst 100 --rounds 3 --out bench/results/<stamp>-<machine>-start-floor.md
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
from local_processes import emit, free_port, start_mock, start_server, stop, wait_http

PROFILE = Path(__file__).resolve().parents[2] / "src/agentos_bench/profiles/runs.toml"
WAYS = (
    ("404", "POST", "/v1/agents/nosuch/runs"),
    ("start", "POST", "/v1/agents/bench/runs"),
    ("healthz", "GET", "/healthz"),
)


async def burst(http: aiohttp.ClientSession, method: str, url: str, n: int) -> list[float]:
    async def one() -> float:
        sent = time.perf_counter()
        async with http.request(method, url, json={"input": "go"} if method == "POST" else None) as answer:
            await answer.read()
        return time.perf_counter() - sent

    return sorted(await asyncio.gather(*(one() for _ in range(n))))


Row = tuple[str, int, float, float]  # (way, round, p50 ms, p99 ms)


async def measure(args: argparse.Namespace, url: str, server: subprocess.Popen[bytes]) -> list[Row]:
    rows = []
    await wait_http(f"{url}/healthz", server, "the server")
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        await asyncio.gather(*(http.get(f"{url}/healthz") for _ in range(args.burst)))  # warm connections
        for way, method, path in WAYS:
            for i in range(args.rounds):
                lat = await burst(http, method, url + path, args.burst)
                rows.append((way, i + 1, 1000 * lat[len(lat) // 2], 1000 * lat[int(len(lat) * 0.99) - 1]))
                await asyncio.sleep(args.pause_secs)
    return rows


def main(args: argparse.Namespace) -> None:
    folder = Path(tempfile.mkdtemp(prefix="start-floor-"))
    mock_port, port = free_port(), free_port()
    mock = start_mock(mock_port, "--scenario", "tools", "--ttft-ms", "50")
    with (folder / "server.log").open("wb") as log:
        server = start_server(PROFILE, port, mock_port, folder / "data", log)
    try:
        rows = asyncio.run(measure(args, f"http://127.0.0.1:{port}", server))
    finally:
        stop(server, mock)
    lines = [
        "# Run starts at once against the same burst with no run behind it",
        "",
        f"- Date (UTC): {time.strftime('%Y-%m-%d %H:%M', time.gmtime())}; {os.cpu_count()} cores; profile `runs`,"
        " mock `--scenario tools --ttft-ms 50`",
        f"- Command: `python bench/scripts/start_floor.py {' '.join(sys.argv[1:])}`",
        f"- {args.burst} requests at once per burst, {args.pause_secs} s between bursts, in this order",
        "",
        "| burst | # | p50 ms | p99 ms |",
        "|---|---|---|---|",
    ]
    lines += [f"| {way} | {i} | {p50:.1f} | {p99:.1f} |" for way, i, p50, p99 in rows]
    emit("\n".join(lines) + "\n", args.out)


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--burst", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pause-secs", type=float, default=3.0)
    parser.add_argument("--out", default="")
    return parser.parse_args()


if __name__ == "__main__":
    main(parse())
