"""The fresh-connection prober of `agentos bench overload`, in a process of its own.

Usage: `python -m agentos_bench.overload.probe JOB.json`. It prints `ready`, waits for `go` on
stdin, then sends `count` turn probes and `count` /healthz probes, alternating, one every
`interval_s`. Each opens a new TCP connection, sends one HTTP/1.1 request with
`Connection: close`, reads the status line, the headers and `Content-Length` bytes of body, and
closes: the time is from before the connect to the last byte of the answer. It prints one JSON
line: per kind, the latencies (seconds, in send order) of the answers with the expected status
(429 for turns, 200 for /healthz), every status, the error codes, and how many 429s carried
`Retry-After`. Raw sockets, no client library: the client adds as little as it can.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import msgspec

from agentos.mock.loop import run_loop


class Job(msgspec.Struct, frozen=True):
    host: str
    port: int
    session_id: str
    count: int
    interval_s: float
    timeout_s: float


@dataclass
class Results:
    expect: int  # the status whose latencies are kept (429 for turns, 200 for /healthz)
    latencies_s: list[float] = field(default_factory=list)  # of the answers with the expected status
    statuses: Counter[str] = field(default_factory=Counter)  # "429", "200", ..., "error", "timeout"
    codes: Counter[str] = field(default_factory=Counter)  # the JSON error codes
    retry_after: int = 0  # 429s with a Retry-After header

    def as_dict(self) -> dict[str, Any]:
        return {
            "latencies_s": [round(v, 6) for v in self.latencies_s],
            "statuses": dict(self.statuses),
            "codes": dict(self.codes),
            "retry_after": self.retry_after,
        }


def turn_request(job: Job) -> bytes:
    body = b'{"input": "are you there?"}'
    head = (
        f"POST /v1/sessions/{job.session_id}/turns HTTP/1.1\r\nHost: {job.host}:{job.port}\r\n"
        f"Content-Type: application/json\r\nAccept: application/json\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode() + body


def healthz_request(job: Job) -> bytes:
    return f"GET /healthz HTTP/1.1\r\nHost: {job.host}:{job.port}\r\nConnection: close\r\n\r\n".encode()


async def one_probe(job: Job, request: bytes, results: Results) -> None:
    """One request on a fresh connection; its latency, status and error code go to `results`."""
    started = time.perf_counter()
    writer = None
    try:
        async with asyncio.timeout(job.timeout_s):
            reader, writer = await asyncio.open_connection(job.host, job.port)
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            status, headers = parse_head(head)
            body = await reader.readexactly(int(headers.get("content-length", "0")))
        elapsed = time.perf_counter() - started
    except TimeoutError:
        results.statuses["timeout"] += 1
        return
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
        results.statuses["error"] += 1
        return
    finally:
        if writer is not None:
            writer.close()
    if status == results.expect:
        results.latencies_s.append(elapsed)
    results.statuses[str(status)] += 1
    if status == 429 and "retry-after" in headers:
        results.retry_after += 1
    if status >= 400:
        results.codes[error_code(body)] += 1


def parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    """The status and the (lower-cased) headers of a response head.

    Raises: ValueError: not an HTTP/1.1 status line."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/"):
        raise ValueError(f"not a status line: {lines[0]!r}")
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return int(parts[1]), headers


def error_code(body: bytes) -> str:
    """`error.code` of a JSON error body; "not_json" for anything else."""
    try:
        code = msgspec.json.decode(body)["error"]["code"]
    except (msgspec.DecodeError, KeyError, TypeError):
        return "not_json"
    return str(code)


async def probe_all(job: Job) -> dict[str, Results]:
    """Every probe, on schedule (a late one does not delay the next)."""
    results = {"turn": Results(429), "healthz": Results(200)}
    requests = {"turn": turn_request(job), "healthz": healthz_request(job)}
    loop = asyncio.get_running_loop()
    start = loop.time()
    tasks = []
    for i in range(2 * job.count):
        kind = "turn" if i % 2 == 0 else "healthz"
        await asyncio.sleep(max(0.0, start + i * job.interval_s - loop.time()))
        tasks.append(asyncio.create_task(one_probe(job, requests[kind], results[kind])))
    await asyncio.gather(*tasks)
    return results


async def main_async(job: Job) -> None:
    print("ready", flush=True)
    line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    if line.strip() != "go":
        return
    started = time.perf_counter()
    results = await probe_all(job)
    out = {kind: r.as_dict() for kind, r in results.items()} | {"elapsed_s": time.perf_counter() - started}
    print(msgspec.json.encode(out).decode(), flush=True)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m agentos_bench.overload.probe JOB.json", file=sys.stderr)
        return 2
    with open(args[0], "rb") as f:
        job = msgspec.json.decode(f.read(), type=Job)
    run_loop(main_async(job))
    return 0


if __name__ == "__main__":
    sys.exit(main())
