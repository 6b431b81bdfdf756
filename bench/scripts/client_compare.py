"""Which HTTP client should stream from the provider? aiohttp against httpx, 1000 streams at once.

Starts the mock provider in a child process (its CPU is not counted), then, in this process,
opens N concurrent streamed chat completions with each client in turn and reports the wall
time, this process's CPU time per stream, and failures. The client with the lower CPU per
stream leaves more of the machine to the server.

    .venv/bin/pip install httpx   # not a dependency of Agent OS
    .venv/bin/python bench/scripts/client_compare.py --streams 1000 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import subprocess
import sys
import time
from typing import Any

import aiohttp
import httpx
import uvloop

BODY = {"model": "mock-1", "stream": True, "messages": [{"role": "user", "content": "hello"}]}


async def aiohttp_stream(session: aiohttp.ClientSession, url: str) -> int:
    async with session.post(url, json=BODY) as r:
        n = 0
        async for chunk in r.content.iter_any():
            n += chunk.count(b"data:")
        return n


async def httpx_stream(client: httpx.AsyncClient, url: str) -> int:
    async with client.stream("POST", url, json=BODY) as r:
        n = 0
        async for chunk in r.aiter_raw():
            n += chunk.count(b"data:")
        return n


async def run(kind: str, url: str, streams: int) -> dict[str, Any]:
    cpu0, t0 = time.process_time(), time.perf_counter()
    if kind == "aiohttp":
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
            results = await asyncio.gather(*(aiohttp_stream(s, url) for _ in range(streams)), return_exceptions=True)
    else:
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
        async with httpx.AsyncClient(limits=limits, timeout=60) as c:
            results = await asyncio.gather(*(httpx_stream(c, url) for _ in range(streams)), return_exceptions=True)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    failures = sum(1 for r in results if isinstance(r, BaseException))
    return {
        "client": kind,
        "streams": streams,
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "cpu_ms_per_stream": round(cpu * 1000 / streams, 3),
        "failures": failures,
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--streams", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--ttft-ms", type=float, default=2000)
    args = p.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    env = os.environ | {"MOCK_TTFT_MS": str(args.ttft_ms), "MOCK_TPS": "200", "MOCK_TOKENS": "8"}
    mock = subprocess.Popen(
        [sys.executable, "-m", "agentos", "mock-llm", "--port", "0"], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        line = mock.stdout.readline() if mock.stdout else ""
        url = line.split()[-1] + "/chat/completions"
        rows = []
        for _ in range(args.rounds):
            for kind in ("aiohttp", "httpx"):
                rows.append(uvloop.run(run(kind, url, args.streams)))
                print(json.dumps(rows[-1]), flush=True)
    finally:
        mock.terminate()
        mock.wait()
    print(
        json.dumps(
            {
                "machine": platform.processor() or platform.machine(),
                "cores": os.cpu_count(),
                "versions": {"aiohttp": aiohttp.__version__, "httpx": httpx.__version__},
                "command": " ".join(sys.argv),
                "rows": rows,
            }
        )
    )


if __name__ == "__main__":
    main()
