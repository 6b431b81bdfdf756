"""How long a burst of trigger deliveries takes to run at a tenant's `max_active_runs`, against
the floor that cap sets: N signed deliveries at once to one `agentos serve` whose tenant runs at
most K at a time (each run one mock call), timed from the first send until every delivery's run
has ended, beside one delivery alone (a run's own time). The floor is ceil(N / K) runs back to
back; what the dispatcher adds is the wait between a place freeing and the next start.

    python bench/scripts/trigger_backlog.py --deliveries 40 --cap 4 --rounds 3 --out <result file>

`--nodes N` (N > 1) runs N servers sharing PostgreSQL and Redis (`--postgres-url`, `--redis-url`;
a schema and key prefix of their own), the deliveries sent to them in turn: a place freed on one
node must hurry a delivery another node postponed.

`PYTHONPATH=<worktree>/src` runs another commit's server with the same script (a before/after pair).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import secrets
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
CLUSTER = """\
[store]
backend = "postgres"
postgres_url = "{postgres_url}"
postgres_schema = "{schema}"
[coordination]
redis_url = "{redis_url}"
key_prefix = "{schema}:"
[security]
key_pepper = "{pepper}"  # one for every node: they share the tenants table
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


async def burst(http: aiohttp.ClientSession, urls: list[str], trigger: dict[str, str], n: int) -> float:
    """Seconds from the first send until the runs of `n` deliveries sent at once (to the nodes
    in turn) have all ended."""
    started = time.perf_counter()
    run_ids = await asyncio.gather(*(deliver(http, urls[i % len(urls)], trigger) for i in range(n)))
    await asyncio.gather(*(ended(http, urls[0], r, started + 120) for r in run_ids))
    return time.perf_counter() - started


async def measure(
    args: argparse.Namespace, urls: list[str], servers: list[subprocess.Popen[bytes]]
) -> list[tuple[float, float]]:
    """(one delivery alone, the burst) per round."""
    rows = []
    for url, server in zip(urls, servers, strict=True):
        await wait_http(f"{url}/healthz", server, "the server")
    async with aiohttp.ClientSession() as http:
        body = {"agent": "echo", "input_template": "{payload.text}"}
        async with http.post(f"{urls[0]}/v1/triggers", json=body) as r:
            assert r.status == 201, await r.text()
            trigger = await r.json()
        await burst(http, urls, trigger, len(urls))  # warm: the agent's first run, the connections
        for _ in range(args.rounds):
            rows.append((await burst(http, urls, trigger, 1), await burst(http, urls, trigger, args.deliveries)))
    return rows


def main(args: argparse.Namespace) -> None:
    folder = Path(tempfile.mkdtemp(prefix="trigger-backlog-"))
    config = folder / "agentos.toml"
    text = CONFIG.format(cap=args.cap)
    if args.nodes > 1:
        schema = f"bench_triggers_{uuid.uuid4().hex[:8]}"
        pepper = secrets.token_urlsafe(32)
        text += CLUSTER.format(postgres_url=args.postgres_url, redis_url=args.redis_url, schema=schema, pepper=pepper)
    config.write_text(text)
    mock_port, ports = free_port(), [free_port() for _ in range(args.nodes)]
    mock = start_mock(mock_port, "--ttft-ms", str(args.ttft_ms), "--tokens", "2")
    servers = []
    for i, port in enumerate(ports):
        with (folder / f"server-{i}.log").open("wb") as log:
            servers.append(start_server(config, port, mock_port, folder / f"data-{i}", log))
    try:
        rows = asyncio.run(measure(args, [f"http://127.0.0.1:{port}" for port in ports], servers))
    finally:
        stop(*servers, mock)
    waves = math.ceil(args.deliveries / args.cap)
    source, commit = server_source()
    lines = [
        "# A burst of trigger deliveries at a tenant's max_active_runs",
        "",
        f"- Date (UTC): {time.strftime('%Y-%m-%d %H:%M', time.gmtime())}; {os.cpu_count()} cores;"
        f" server from `{source}` (commit {commit})",
        f"- Command: `python bench/scripts/trigger_backlog.py {' '.join(sys.argv[1:])}`",
        f"- {args.nodes} node(s){' sharing PostgreSQL and Redis' if args.nodes > 1 else ''}, the deliveries"
        " sent to them in turn",
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
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--postgres-url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--out", default="")
    return parser.parse_args()


if __name__ == "__main__":
    main(parse())
