"""What the provider layer costs a model call (issue 27's cost bar), measured in one process.

A turn's model call reaches the provider in one of two ways here, alternated in rounds in the
same sitting against one real `agentos mock-llm` (its own process, the seed profile by default):

- `wire`: the wire client the router would call (`Router._client(route)`, the same object),
  called directly: what a turn paid before the provider layer;
- `router`: `Router.stream` with one healthy target, as `open_services` builds it: breakers,
  per-target statistics and TTFT, the priced completion, and the usage ledger writing one row per
  call through a real SQLite store's batched writer (the budgets meter is left out: with no
  budget set the server skips it, `Meter.idle`).

C callers each make calls back to back for the round's window; CPU per call is this process's
CPU over the window (every thread: the ledger's writer included) over the calls that ended in
it, and calls/s is those calls over the window. The mock's CPU is not in it. So the difference
between the two ways is the layer's own cost, without the server, the load generator or the
mock in the number; the server's end-to-end pairs (`cost_pairs.sh`) carry those too.

    python bench/scripts/router_cost.py --concurrency 1000 --rounds 3 --window-secs 10 \
        --out bench/results/<stamp>-<machine>-router-cost.md
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import aclosing
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from local_processes import emit, free_port, start_mock, stop

from agentos.clock import MonotonicClock
from agentos.config import resolve_paths, settings_from_dict
from agentos.metrics import Metrics
from agentos.providers.base import CallContext, ChatRequest, Completion, Provider
from agentos.providers.router import Router, open_router
from agentos.services import _make_store
from agentos.tenancy.ledger import StoreLedger

HELLO = [{"role": "user", "content": "hello"}]


@dataclass
class Round:
    way: str
    calls: int
    window_s: float
    cpu_s: float

    @property
    def per_s(self) -> float:
        return self.calls / self.window_s

    @property
    def cpu_ms_per_call(self) -> float:
        return 1000 * self.cpu_s / self.calls


def spawn_mock(args: argparse.Namespace) -> tuple[subprocess.Popen[bytes], str]:
    """The mock in its own process (before the loop starts: no blocking call inside it)."""
    port = free_port()
    proc = start_mock(port, "--ttft-ms", str(args.ttft_ms), "--tps", str(args.tps), "--tokens", str(args.tokens))
    return proc, f"http://127.0.0.1:{port}/v1"


async def wait_mock(url: str) -> None:
    async with aiohttp.ClientSession() as http:
        for _ in range(200):
            try:
                async with http.get(f"{url}/models") as answer:
                    if answer.status == 200:
                        return
            except aiohttp.ClientError:
                await asyncio.sleep(0.05)
    raise SystemExit("the mock did not start")


async def one_call(call: Provider | Router, context: CallContext) -> None:
    async with aclosing(call.stream(ChatRequest(HELLO, context=context))) as stream:
        async for item in stream:
            if isinstance(item, Completion):
                return
    raise RuntimeError("a call ended without a completion")


async def measure(
    way: str, call: Provider | Router, concurrency: int, warmup_s: float, window_s: float, spread_s: float
) -> Round:
    """`concurrency` callers back to back, their first calls spread over `spread_s`; the calls
    that end inside the window, and the CPU."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    opens, closes = start + warmup_s, start + warmup_s + window_s
    ended = 0
    cpu: dict[str, float] = {}

    async def caller(i: int) -> None:
        nonlocal ended
        context = CallContext(tenant_id="bench", session_id=f"s{i}", call_id=f"c{i}")
        # Spread over one call's length: callers started together would stay in waves of
        # `concurrency` calls, and a window would hold a whole number of waves (+-20% calls/s).
        await asyncio.sleep(spread_s * i / concurrency)
        while loop.time() < closes:
            await one_call(call, context)
            if opens <= loop.time() < closes:
                ended += 1

    async def clock() -> None:
        await asyncio.sleep(max(0.0, opens - loop.time()))
        cpu["open"] = time.process_time()
        await asyncio.sleep(max(0.0, closes - loop.time()))
        cpu["close"] = time.process_time()

    await asyncio.gather(clock(), *(caller(i) for i in range(concurrency)))
    return Round(way, ended, window_s, cpu["close"] - cpu["open"])


async def main(args: argparse.Namespace, url: str) -> str:
    await wait_mock(url)
    data = Path(tempfile.mkdtemp(prefix="router-cost-"))
    settings = resolve_paths(
        settings_from_dict(
            {"provider": {"url": url, "model": "mock-1"}, "store": {"enabled": True}, "data_dir": str(data)}
        )
    )
    store = _make_store(settings, Metrics())
    await store.start()
    ledger = StoreLedger(store)
    router = open_router(settings, MonotonicClock(), ledger=ledger)
    unledgered = open_router(settings, MonotonicClock())
    model, routes = router._resolve(None)
    wire = router._client(routes[0])  # the very client the router calls
    ways: dict[str, Provider | Router] = {"wire": wire, "router": router, "router-no-ledger": unledgered}
    rounds: list[Round] = []
    try:
        spread_s = args.ttft_ms / 1000 + args.tokens / args.tps  # one call's length
        await measure("warm", router, args.concurrency, 1.0, 3.0, spread_s)  # connections, caches
        for _ in range(args.rounds):
            for way in args.ways.split(","):
                call = ways[way]
                done = await measure(way, call, args.concurrency, args.warmup_secs, args.window_secs, spread_s)
                rounds.append(done)
                print(f"{way:7} {done.calls} calls {done.per_s:.1f}/s {done.cpu_ms_per_call:.4f} ms CPU/call")
    finally:
        await router.aclose()
        await unledgered.aclose()
        await store.close()
    return render(args, rounds, ledger.statistics().recorded_total, model)


def render(args: argparse.Namespace, rounds: list[Round], recorded: int, model: str) -> str:
    def pooled(way: str) -> tuple[float, float]:
        mine = [r for r in rounds if r.way == way]
        calls = sum(r.calls for r in mine)
        return sum(r.calls for r in mine) / sum(r.window_s for r in mine), 1000 * sum(r.cpu_s for r in mine) / calls

    wire_rate, wire_cpu = pooled("wire")
    router_rate, router_cpu = pooled("router")
    order = args.ways.split(",")
    by_round = [rounds[i : i + len(order)] for i in range(0, len(rounds), len(order))]
    diffs = [r[order.index("router")].cpu_ms_per_call - r[order.index("wire")].cpu_ms_per_call for r in by_round]
    lines = [
        "# The provider layer's own cost per model call (issue 27), in one process",
        "",
        f"- Date (UTC): {time.strftime('%Y-%m-%d %H:%M', time.gmtime())}; machine: {platform.node()}, "
        f"{os.cpu_count()} cores, {platform.processor() or platform.machine()}, Python {platform.python_version()}",
        f"- Command: `python bench/scripts/router_cost.py {' '.join(sys.argv[1:])}`",
        f"- Mock: `agentos mock-llm --ttft-ms {args.ttft_ms} --tps {args.tps} --tokens {args.tokens}` "
        "(its own process); "
        f"{args.concurrency} callers back to back; window {args.window_secs} s after {args.warmup_secs} s; "
        f"the ways alternated, {args.rounds} rounds; model `{model}`; ledger rows handed to the store: {recorded}",
        "",
        "| round | way | calls in window | calls/s | CPU ms per call |",
        "|---|---|---|---|---|",
    ]
    for i, r in enumerate(rounds):
        lines.append(f"| {i // len(order) + 1} | {r.way} | {r.calls} | {r.per_s:.1f} | {r.cpu_ms_per_call:.4f} |")
    lines += [
        "",
        f"Pooled: wire {wire_rate:.1f} calls/s, {wire_cpu:.4f} ms; router {router_rate:.1f} calls/s, "
        f"{router_cpu:.4f} ms. **Router / wire calls/s: {router_rate / wire_rate:.4f}; CPU added per call: "
        f"{router_cpu - wire_cpu:+.4f} ms** (per round: {', '.join(f'{d:+.4f}' for d in diffs)}; "
        f"median {statistics.median(diffs):+.4f}).",
    ]
    if "router-no-ledger" in order:
        bare_rate, bare_cpu = pooled("router-no-ledger")
        lines.append(
            f"Without the ledger: {bare_rate:.1f} calls/s ({bare_rate / wire_rate:.4f} of wire), {bare_cpu:.4f} ms "
            f"({bare_cpu - wire_cpu:+.4f} ms against wire)."
        )
    lines.append("")
    return "\n".join(lines)


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup-secs", type=float, default=3.0)
    parser.add_argument("--window-secs", type=float, default=10.0)
    parser.add_argument("--ttft-ms", type=float, default=2000.0)
    parser.add_argument("--tps", type=float, default=200.0)
    parser.add_argument("--tokens", type=int, default=8)
    parser.add_argument("--ways", default="wire,router,router-no-ledger", help="alternated in this order")
    parser.add_argument("--out", default="")
    return parser.parse_args()


if __name__ == "__main__":
    import uvloop  # the server's event loop (agentos.server), so the calls run as they do there

    options = parse()
    mock, mock_url = spawn_mock(options)
    try:
        report = uvloop.run(main(options, mock_url))
    finally:
        stop(mock)
    emit(report, options.out)
