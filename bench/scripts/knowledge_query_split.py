"""Where a knowledge query's time goes: the server's spans (collection read, query embedding,
index version check, the two searches, chunk reads) against the time the caller waits.

Runs the server in this process (`open_services` + `create_app` on a loopback port) on a data
dir kept by `agentos bench knowledge --keep-dir DIR --scale 1`, the mock provider in its own
process as the bench runs it, and the client in this process (so its own work is in "total"
too: compare two versions of the code with the same command, not with the bench's numbers).

    PYTHONPATH=$PWD/src:$PWD .venv/bin/python bench/scripts/knowledge_query_split.py \
        --keep-dir /tmp/kq-keep --collection c100000 --queries 300 [--filter] [--profile out.prof]

The spans are timed by wrapping the service's steps in this script only (the product has no
timing hooks); "rest" is the total minus the service's `query`: HTTP, routing, auth, body
parsing, the JSON answer and the client.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import functools
import gc
import os
import random
import statistics
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from agentos_bench.common.processes import free_port, stop_child
from agentos_bench.knowledge.corpus import query_from
from agentos_bench.knowledge.plan import ONE_GROUP, TENANT, TOP_K

SPANS: dict[str, list[float]] = defaultdict(list)
_GC_STARTED: list[float] = []


def gc_span(phase: str, info: dict[str, Any]) -> None:
    """Python's cyclic collections, timed (a full one walks every object the indexes hold)."""
    if phase == "start":
        _GC_STARTED[:] = [time.perf_counter()]
    elif _GC_STARTED:
        SPANS[f"gc gen{info['generation']}"].append(time.perf_counter() - _GC_STARTED[0])


def timed(name: str, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return await fn(*args, **kwargs)
        finally:
            SPANS[name].append(time.perf_counter() - began)

    return wrapper


def instrument(knowledge: Any) -> None:
    storage, cache = knowledge.storage, knowledge._indexes
    for name in ("get_collection", "index_version", "chunks"):
        setattr(storage, name, timed(f"storage.{name}", getattr(storage, name)))
    knowledge._embed_query = timed("embed_query", knowledge._embed_query)
    cache.current = timed("indexes.current", cache.current)
    for name in ("search_both", "search", "search_text"):  # one call, or two (the text one beside the embedding)
        setattr(cache, name, timed(name, getattr(cache, name)))
    knowledge._hits = timed("hits", knowledge._hits)
    knowledge.query = timed("service.query", knowledge.query)


async def query_texts(knowledge: Any, name: str, count: int, seed: int) -> list[str]:
    collection = await knowledge.get_collection(TENANT, name)
    _, top = await knowledge.storage.index_version(collection.collection_id)
    rng = random.Random(seed)
    rows = await knowledge.storage.chunks(collection.collection_id, rng.sample(range(1, top + 1), count * 2))
    return [query_from(row.text, rng) for row in rows][:count]


async def run(args: argparse.Namespace) -> None:
    from agentos.api.app import create_app
    from agentos.cli import build_parser, settings_from_args
    from agentos.mock.server import MockSettings
    from agentos.services import open_services
    from agentos_bench.common.mock_process import start_mock_process

    keep = Path(args.keep_dir)
    mock = await start_mock_process(MockSettings(ttft_ms=0, tokens=1), Path("/tmp"))
    argv = ["serve", "--config", str(keep / "agentos.toml"), "--data-dir", str(keep / "data")]
    settings = settings_from_args(build_parser().parse_args([*argv, "--provider-url", mock.url]))
    services = await open_services(settings)
    runner = web.AppRunner(create_app(services))
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        await measure(args, services.knowledge, f"http://127.0.0.1:{port}")
    finally:
        await runner.cleanup()
        await services.close()
        await stop_child(mock.process)


async def measure(args: argparse.Namespace, knowledge: Any, url: str) -> None:
    texts = await query_texts(knowledge, args.collection, args.queries + 20, args.seed)
    body_filter = ONE_GROUP if args.filter else None
    totals: list[float] = []
    profile = cProfile.Profile() if args.profile else None
    async with aiohttp.ClientSession() as http:
        for index, text in enumerate(texts):
            if index == 20:  # the first ones load the index and warm up
                instrument(knowledge)
                gc.callbacks.append(gc_span)
                SPANS.clear()
                if profile:
                    profile.enable()
            began = time.perf_counter()
            body = {"query": text, "top_k": TOP_K, "filter": body_filter}
            async with http.post(f"{url}/v1/collections/{args.collection}/query", json=body) as response:
                await response.read()
                assert response.status == 200, response.status
            if index >= 20:
                totals.append(time.perf_counter() - began)
    if profile:
        profile.disable()
        profile.dump_stats(args.profile)
    report(totals)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1000


def report(totals: list[float]) -> None:
    print(f"load average {os.getloadavg()[0]:.2f}; {len(totals)} queries; ms: mean / p50 / p95 / max (calls)")
    print(f"  gc counts now {gc.get_count()}, tracked objects {len(gc.get_objects())}")
    service = SPANS["service.query"]
    rest = [t - s for t, s in zip(totals, service, strict=True)]
    for name, values in [("total", totals), *sorted(SPANS.items()), ("rest (http, json, client)", rest)]:
        print(f"  {name:28s} {statistics.mean(values) * 1000:6.2f} {pct(values, 0.5):6.2f} {pct(values, 0.95):6.2f}"
              f" {max(values) * 1000:7.2f}  ({len(values)})")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--keep-dir", required=True)
    p.add_argument("--collection", default="c100000")
    p.add_argument("--queries", type=int, default=300)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--filter", action="store_true", help=f"every query filtered by {ONE_GROUP}")
    p.add_argument("--profile", help="write a cProfile of the measured queries here")
    asyncio.run(run(p.parse_args()))


if __name__ == "__main__":
    main()
