"""The server's own view of its memory, beside the process tree's: `GET /v1/admin/memory`.

The server answers it only when asked (nothing is sampled on its normal path): the interpreter's
allocated blocks, glibc's `mallinfo2()` (the C heap in use and free but held) and, when the bench
started it with `PYTHONTRACEMALLOC=1` (`--tracemalloc`), the Python heap tracemalloc counts. The
bench's servers are open on loopback, so the bench is their administrator; an answer other than
200 (an older server, a key without `admin`) is reported as no figures, never as zero.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import msgspec

_MB = 1024 * 1024


async def heap_sample(http: aiohttp.ClientSession, base_url: str) -> dict[str, Any]:
    """The heap columns of one step (absent when the server gave no figures)."""
    try:
        async with http.get(f"{base_url}/v1/admin/memory") as response:
            if response.status != 200:
                return {}
            figures: dict[str, Any] = msgspec.json.decode(await response.read())
    except (aiohttp.ClientError, TimeoutError, msgspec.DecodeError):
        return {}
    return heap_columns(figures)


def heap_columns(figures: dict[str, Any]) -> dict[str, Any]:
    """`/v1/admin/memory` as the staircase's columns: MB, and blocks as a count."""
    columns: dict[str, Any] = {"blocks": figures.get("allocated_blocks")}
    malloc = figures.get("malloc")
    if malloc:
        columns["malloc_used_mb"] = round(malloc["in_use_bytes"] / _MB, 2)
        columns["malloc_free_mb"] = round(malloc["free_bytes"] / _MB, 2)
    traced = figures.get("tracemalloc")
    if traced:
        columns["heap_mb"] = round(traced["current_bytes"] / _MB, 2)
        columns["tracemalloc_overhead_mb"] = round(traced["overhead_bytes"] / _MB, 2)
    trim = figures.get("trim")
    if trim:
        columns["trims"] = trim["trims"]
        columns["trim_released_mb"] = round(trim["released_bytes"] / _MB, 2)
        columns["trim_last_ms"] = trim["last_ms"]
    return columns
