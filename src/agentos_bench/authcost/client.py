"""The auth-cost bench's load: a separate process, so its CPU is never the server's.

    python -m agentos_bench.authcost.client JOB.json

`JOB.json` (written by `agentos_bench.authcost.bench`): `base_url`, `targets` (a list of
[Authorization header or "", session id]), `requests`, `concurrency`, `warmup`, `timeout_s`.
The protocol on stdin/stdout, so the parent samples the server's CPU right around the
measured requests and nothing else:

    client: warms up (`warmup` requests, which also open the keep-alive connections), prints `ready`
    parent: samples the server's CPU, writes `go`
    client: sends exactly `requests` requests, prints one JSON line (`Outcome`), exits

Request j reads target j modulo the number of targets: every key, and every session, in turn.
`concurrency` workers share one counter over one connection pool of that size; the whole
measured loop is bounded by `timeout_s`. Nothing but a missing `go` makes it exit non-zero: a
failed request is counted (by status, or as an error), never raised.
"""

from __future__ import annotations

import asyncio
import itertools
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import msgspec

from agentos.mock.loop import run_loop
from agentos_bench.common.procfs import self_cpu_s

_GO_TIMEOUT_S = 60.0


class Job(msgspec.Struct, frozen=True):
    base_url: str
    targets: list[tuple[str, str]]
    requests: int
    concurrency: int
    warmup: int
    timeout_s: float


class Outcome(msgspec.Struct):
    """What the client saw over the measured requests. `rate_headers`: answers that carried a
    `RateLimit` header (every one in B, none in A: the proof that the limiter ran)."""

    requests: int = 0
    ok: int = 0
    statuses: dict[str, int] = msgspec.field(default_factory=dict)
    errors: int = 0
    rate_headers: int = 0
    elapsed_s: float = 0.0
    client_cpu_s: float = 0.0
    timed_out: bool = False


async def _drive(http: aiohttp.ClientSession, job: Job, count: int, outcome: Outcome) -> None:
    counter = itertools.count()
    statuses: Counter[int] = Counter()
    urls = [(f"{job.base_url}/v1/sessions/{sid}", {"Authorization": auth} if auth else {}) for auth, sid in job.targets]

    async def worker() -> None:
        while (j := next(counter)) < count:
            url, headers = urls[j % len(urls)]
            try:
                async with http.get(url, headers=headers) as response:
                    await response.read()
                    statuses[response.status] += 1
                    outcome.rate_headers += "RateLimit" in response.headers
            except (aiohttp.ClientError, OSError):
                outcome.errors += 1
            outcome.requests += 1

    try:
        async with asyncio.timeout(job.timeout_s):
            await asyncio.gather(*(worker() for _ in range(job.concurrency)))
    except TimeoutError:
        outcome.timed_out = True
    outcome.ok = statuses[200]
    outcome.statuses = {str(s): n for s, n in sorted(statuses.items())}


async def run(job: Job) -> Outcome:
    """Warm up, say `ready`, wait for `go`, measure; the outcome of the measured requests."""
    connector = aiohttp.TCPConnector(limit=job.concurrency, force_close=False)
    timeout = aiohttp.ClientTimeout(total=job.timeout_s)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
        await _drive(http, job, job.warmup, Outcome())
        print("ready", flush=True)
        loop = asyncio.get_running_loop()
        line = await asyncio.wait_for(loop.run_in_executor(None, sys.stdin.readline), _GO_TIMEOUT_S)
        if line.strip() != "go":
            raise SystemExit(f"auth-cost client: expected 'go', got {line!r}")
        outcome = Outcome()
        cpu, start = self_cpu_s(), time.perf_counter()
        await _drive(http, job, job.requests, outcome)
        outcome.elapsed_s = time.perf_counter() - start
        outcome.client_cpu_s = self_cpu_s() - cpu
    return outcome


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        raise SystemExit("usage: python -m agentos_bench.authcost.client JOB.json")
    job = msgspec.json.decode(Path(args[0]).read_bytes(), type=Job)
    outcome = run_loop(run(job))
    sys.stdout.write(msgspec.json.encode(outcome).decode() + "\n")
    sys.stdout.flush()
    return 0


def job_json(job: Job) -> bytes:
    """The job file's bytes (for the parent)."""
    return msgspec.json.encode(job)


def outcome_from_line(line: bytes) -> Outcome:
    return msgspec.json.decode(line, type=Outcome)


def as_dict(outcome: Outcome) -> dict[str, Any]:
    return msgspec.structs.asdict(outcome)


if __name__ == "__main__":
    sys.exit(main())
