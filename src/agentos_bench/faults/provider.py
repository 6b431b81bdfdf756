"""Provider faults and overload, each against a fresh server and mock.

Provider faults: the mock fails a share of its calls (500), holds a share open without a word
(hangs), and answers every N-th with 429; chat users keep sending turns for `seconds`. Every turn
stream must end with exactly one terminal event, and no response may be a 5xx.

Overload: `kernel.max_in_flight_turns` admits `limit` turns; three times as many users send turns
against a slow model (a refused user tries again 0.1 s later). Measured: goodput (turns completed
within the overload window per second, against the capacity the limit allows: `limit / turn
time`; the first turns' own duration makes a short window read low), the latency of the `429`
refusals (p50/p99, each on a connection of its own, as a newcomer's would be: timed by `agentos
bench overload`'s prober, a process of its own on raw sockets, with /healthz on the same schedule
as the floor), that every accepted turn completes, and the time to recover: from the moment the
users stop sending until a new turn is accepted (while the last turns drain).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from agentos.waiting import wait_tasks
from agentos_bench.common.processes import stop_child
from agentos_bench.faults.clients import Ledger, turn_loop
from agentos_bench.overload.bench import make_sessions, run_probe, start_probe
from agentos_bench.overload.probe import Job
from agentos_bench.report.stats import percentiles_ms


@dataclass(frozen=True, kw_only=True)
class ProviderFaultPlan:
    users: int = 20
    seconds: float = 30.0
    error_rate: float = 0.2
    hang_rate: float = 0.05
    fail_every: int = 10  # every N-th call answered 429 with Retry-After


@dataclass(frozen=True, kw_only=True)
class OverloadPlan:
    limit: int = 50  # kernel.max_in_flight_turns
    factor: int = 3  # users = factor x limit
    seconds: float = 20.0
    probes: int = 200  # 429s timed on fresh connections


_PROBE_TIMEOUT_S = 10.0  # the most one probe may take

PROVIDER_CONFIG = """[provider]
first_token_timeout_s = 2.0
idle_timeout_s = 2.0
retry_budget_s = 3.0
"""


def overload_config(limit: int) -> str:
    return f"[kernel]\nmax_in_flight_turns = {limit}\nconcurrency_limit = {limit}\n"


async def provider_faults(plan: ProviderFaultPlan, url: str) -> dict[str, Any]:
    ledger = await _users(url, plan.users, plan.seconds)
    streams = sum(ledger.terminal_counts.values())
    five_xx = sum(count for status, count in ledger.statuses.items() if status >= 500)
    return {
        "users": plan.users,
        "seconds": plan.seconds,
        "error_rate": plan.error_rate,
        "hang_rate": plan.hang_rate,
        "fail_every": plan.fail_every,
        "streams": streams,
        "streams_with_one_terminal_event": ledger.terminal_counts.get(1, 0),
        "terminal_events_per_stream": {str(k): v for k, v in sorted(ledger.terminal_counts.items())},
        "statuses": {str(k): v for k, v in sorted(ledger.statuses.items())},
        "responses_5xx": five_xx,
        "completed_turns": sum(len(t) for t in ledger.turns.values()),
        "client_errors": dict(sorted(ledger.errors.items())),
    }


async def overload(plan: OverloadPlan, url: str, turn_s: float, work_dir: Path) -> dict[str, Any]:
    """`turn_s`: one turn's time on the mock (TTFT + tokens / rate): capacity = limit / turn_s."""
    users = plan.limit * plan.factor
    probe = asyncio.create_task(_refusal_latencies(url, plan, work_dir))
    recovery: list[asyncio.Task[float | None]] = []  # started the moment the overload ends

    def overload_ended() -> None:
        recovery.append(asyncio.create_task(_time_to_accept(url, time.perf_counter())))

    started = time.perf_counter()
    ledger = await _users(url, users, plan.seconds, overload_ended)
    refusals = await probe
    recovered_s = await recovery[0]
    completed = sum(len(t) for t in ledger.turns.values())
    in_window = sum(1 for t in ledger.completed_at if t - started <= plan.seconds)  # not the drain after it
    capacity = plan.limit / turn_s
    accepted = ledger.statuses.get(200, 0)
    return {
        "limit": plan.limit,
        "users": users,
        "seconds": plan.seconds,
        "capacity_turns_per_s": round(capacity, 2),
        "goodput_turns_per_s": round(in_window / plan.seconds, 2),
        "goodput_share": round(in_window / plan.seconds / capacity, 3),
        "accepted": accepted,
        "completed": completed,
        "refused_429": ledger.statuses.get(429, 0),
        "refusal_ms": percentiles_ms(refusals["turn"]["latencies_s"]),
        "refusals_timed": len(refusals["turn"]["latencies_s"]),
        "healthz_floor_ms": percentiles_ms(refusals["healthz"]["latencies_s"]),
        "recovery_s": None if recovered_s is None else round(recovered_s, 3),
        "client_errors": dict(sorted(ledger.errors.items())),
    }


async def _users(url: str, users: int, seconds: float, on_stop: Callable[[], None] = lambda: None) -> Ledger:
    ledger, stop = Ledger(), asyncio.Event()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        tasks = [asyncio.create_task(turn_loop(http, url, ledger, stop, n)) for n in range(users)]
        await asyncio.sleep(seconds)
        stop.set()
        on_stop()
        await wait_tasks(tasks, 35)
    return ledger


async def _refusal_latencies(url: str, plan: OverloadPlan, work_dir: Path) -> dict[str, Any]:
    """Turn requests that get 429 and /healthz, alternating over the middle of the overload, each on
    a connection of its own, timed by the overload bench's prober (`agentos_bench.overload.probe`):
    one 429 measurement for both commands, out of this process's busy event loop."""
    fill_s = min(2.0, plan.seconds / 4)  # the users fill the limit first
    started = time.perf_counter()
    (session_id,) = await make_sessions(url, 1)
    address = urlsplit(url)
    assert address.hostname is not None and address.port is not None
    interval_s = (plan.seconds / 2) / (2 * plan.probes)
    job = Job(address.hostname, address.port, session_id, plan.probes, interval_s, _PROBE_TIMEOUT_S)
    process = await start_probe(job, work_dir)
    try:
        await asyncio.sleep(max(0.0, fill_s - (time.perf_counter() - started)))
        return await run_probe(process, plan.seconds / 2 + _PROBE_TIMEOUT_S + 10)
    finally:
        await stop_child(process)


async def _time_to_accept(url: str, since: float, limit_s: float = 30.0) -> float | None:
    """Seconds from `since` until a turn is accepted (200) at once; None past `limit_s`."""
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{url}/v1/sessions", json={}) as response:
            session_id = (await response.json())["id"]
        while time.perf_counter() - since < limit_s:
            async with http.post(
                f"{url}/v1/sessions/{session_id}/turns",
                json={"input": "again"},
                headers={"Accept": "text/event-stream"},
            ) as response:
                await response.read()
                if response.status == 200:
                    return time.perf_counter() - since
            await asyncio.sleep(0.05)
    return None
