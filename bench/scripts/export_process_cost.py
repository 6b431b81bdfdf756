"""The span export process's whole CPU per span: `python -m agentos.telemetry.otel` fed a chat
turn's spans through its pipe, as the server feeds it, posting to an OTLP receiver on loopback
(bench/scripts/otlp_sink.py's, on a thread of this script). Where `otlp_encode_cost.py` times the
encoding alone, this counts all the export process does: reading the pipe, MessagePack, the
encoding, the HTTP posts (the SDK's exporter, over `requests`).

The process's CPU (user + system, the children's rusage) for `--turns` chat turns (the same
spans as `otlp_encode_cost.py`), less that of a run with no spans (the interpreter's start and
imports), divided by the spans. `--src DIR` runs the export process of another tree (e.g. `git
archive <commit> src | tar -x -C /tmp/before`, then `--src /tmp/before/src`); given several
times, the trees take turns, run after run, so a change of the machine's load hits them alike.

    PYTHONPATH=src:. .venv/bin/python bench/scripts/export_process_cost.py --turns 5000 --runs 3 \\
        --src /tmp/before/src --src src
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import subprocess
import sys
import threading
from pathlib import Path

import msgspec
from aiohttp import web
from otlp_encode_cost import Kept, chat_turn
from otlp_sink import STATS, traces

from agentos.telemetry.recording import RecordingTracing
from agentos.telemetry.wire import frame


def start_receiver() -> tuple[str, asyncio.AbstractEventLoop]:
    """bench/scripts/otlp_sink.py's receiver on a loop in a thread of this process (its CPU is
    not the export process's); its URL and loop."""
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, name="otlp-receiver", daemon=True).start()

    async def start() -> str:
        app = web.Application(client_max_size=64 << 20)
        app.router.add_post("/v1/traces", traces)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        return f"http://127.0.0.1:{runner.addresses[0][1]}/v1/traces"

    return asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=30), loop


def export_cpu_s(src: str, endpoint: str, payload: bytes) -> float:
    """CPU seconds (user + system) of one export process sending `payload` (frames), answered
    to the end: the children's usage before and after it is waited for."""
    settings = {"endpoint": endpoint, "headers": {}, "timeout_s": 10, "service_name": "agentos", "node": "bench"}
    env = {**os.environ, "PYTHONPATH": str(Path(src).resolve())}
    argv = [sys.executable, "-m", "agentos.telemetry.otel", msgspec.json.encode(settings).decode()]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    answers, _ = process.communicate(payload + frame(b"F", b"1"), timeout=600)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert b"flushed 1" in answers and b"failed" not in answers, answers[-200:]
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(turns: int, batch: int, runs: int, sources: list[str]) -> None:
    kept = Kept()
    tracing = RecordingTracing(kept, sample_ratio=1.0)
    for n in range(turns):
        chat_turn(tracing, n)
    spans = len(kept.records)
    pack = msgspec.msgpack.Encoder().encode
    payload = b"".join(frame(b"B", pack(kept.records[i : i + batch])) for i in range(0, spans, batch))
    endpoint, loop = start_receiver()
    per_span: dict[str, list[float]] = {src: [] for src in sources}
    for _ in range(runs):
        for src in sources:
            idle = export_cpu_s(src, endpoint, b"")
            busy = export_cpu_s(src, endpoint, payload)
            per_span[src].append((busy - idle) / spans * 1e6)
    loop.call_soon_threadsafe(loop.stop)
    print(f"receiver: {STATS}")
    print(f"{turns} turns, {spans} spans, batches of {batch}, {runs} runs; export process CPU a span (µs)")
    for src, values in per_span.items():
        print(f"{src:<40} median {statistics.median(values):7.2f}   runs {' '.join(f'{v:.2f}' for v in values)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--src", action="append", help="a tree's src/ (default: src)")
    args = parser.parse_args()
    main(args.turns, args.batch, args.runs, args.src or ["src"])
