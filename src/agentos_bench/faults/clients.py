"""The fault campaign's clients: chat turns and agent runs that keep going across server crashes,
recording exactly what the server acknowledged.

A turn is acknowledged when its client received `turn.completed`; a run step when its client
received the step's `tool.result` event (with its sequence number), a run when it received
`run.completed`. What a client did not see acknowledged is not counted: a crash may lose it.
Every failure (the server gone, a refusal) is counted by name and retried after `RETRY_S`, until
the campaign says stop; each loop is bounded by that flag and by per-request timeouts.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field

import aiohttp
import msgspec

from agentos.providers.sse_parser import SSEParser
from agentos.waiting import wait_event
from agentos_bench.runs.client import answer_pending, answer_request

RETRY_S = 0.1
TURN_TIMEOUT_S = 30.0
_TERMINAL_TURN = ("turn.completed", "turn.failed", "turn.cancelled")
_TERMINAL_RUN = ("run.completed", "run.failed", "run.cancelled")


@dataclass(slots=True)
class Ledger:
    """What the clients saw acknowledged, and what went wrong on the way."""

    turns: dict[str, set[str]] = field(default_factory=dict)  # session id -> acknowledged turn ids
    steps: dict[str, dict[int, str]] = field(default_factory=dict)  # run id -> {seq: event type} acknowledged
    completed_at: list[float] = field(default_factory=list)  # perf_counter() of each acknowledged turn
    runs_completed: set[str] = field(default_factory=set)
    terminal_counts: Counter[int] = field(default_factory=Counter)  # terminal events per finished turn stream
    statuses: Counter[int] = field(default_factory=Counter)  # HTTP status of every turn POST answered
    errors: Counter[str] = field(default_factory=Counter)


async def turn_loop(http: aiohttp.ClientSession, url: str, ledger: Ledger, stop: asyncio.Event, n: int) -> None:
    """One user: a session, then turns one after another until `stop`."""
    session_id: str | None = None
    turn = 0
    while not stop.is_set():
        try:
            if session_id is None:
                session_id = await _new_session(http, url)
                ledger.turns.setdefault(session_id, set())
            turn += 1
            await _one_turn(http, url, session_id, f"user {n} turn {turn}", ledger)
        except (aiohttp.ClientError, TimeoutError, ConnectionError) as exc:
            ledger.errors[type(exc).__name__] += 1
            await _pause(stop)


async def _new_session(http: aiohttp.ClientSession, url: str) -> str:
    async with http.post(f"{url}/v1/sessions", json={}, timeout=aiohttp.ClientTimeout(total=10)) as response:
        if response.status != 201:
            raise aiohttp.ClientResponseError(response.request_info, (), status=response.status)
        return str((await response.json())["id"])


async def _one_turn(http: aiohttp.ClientSession, url: str, session_id: str, text: str, ledger: Ledger) -> None:
    headers = {"Accept": "text/event-stream"}
    timeout = aiohttp.ClientTimeout(total=TURN_TIMEOUT_S)
    async with http.post(
        f"{url}/v1/sessions/{session_id}/turns", json={"input": text}, headers=headers, timeout=timeout
    ) as response:
        ledger.statuses[response.status] += 1
        if response.status != 200:
            await response.read()
            ledger.errors[f"http_{response.status}"] += 1
            return
        parser, terminals, completed = SSEParser(), 0, None
        async for chunk in response.content.iter_any():
            for event in parser.feed(chunk):
                if event.event in _TERMINAL_TURN:
                    terminals += 1
                    if event.event == "turn.completed":
                        completed = str(msgspec.json.decode(event.data)["turn_id"])
    ledger.terminal_counts[terminals] += 1  # the stream ended normally: it must have held exactly one
    if completed is not None:
        ledger.turns[session_id].add(completed)
        ledger.completed_at.append(time.perf_counter())


async def run_loop(
    http: aiohttp.ClientSession, url: str, agent: str, ledger: Ledger, stop: asyncio.Event, n: int
) -> None:
    """One automation: runs one after another, each followed (across restarts) to its end."""
    run = 0
    while not stop.is_set():
        run += 1
        try:
            run_id = await _start_run(http, url, agent, f"job {n}.{run}")
        except (aiohttp.ClientError, TimeoutError, ConnectionError) as exc:
            ledger.errors[f"start_{type(exc).__name__}"] += 1
            await _pause(stop)
            continue
        ledger.steps[run_id] = {}
        await _follow_run(http, url, run_id, ledger, stop)


async def _start_run(http: aiohttp.ClientSession, url: str, agent: str, text: str) -> str:
    async with http.post(
        f"{url}/v1/agents/{agent}/runs", json={"input": text}, timeout=aiohttp.ClientTimeout(total=10)
    ) as response:
        if response.status != 202:
            raise aiohttp.ClientResponseError(response.request_info, (), status=response.status)
        return str((await response.json())["run_id"])


async def _follow_run(http: aiohttp.ClientSession, url: str, run_id: str, ledger: Ledger, stop: asyncio.Event) -> None:
    """Follow the events, resuming after the last one seen; answer the human; until the end."""
    last_seq = 0
    while not stop.is_set():
        try:
            if last_seq:  # back after a failure: a request answered before a crash may be asked again
                await answer_pending(http, url, run_id)
            events = f"{url}/v1/runs/{run_id}/events"
            read = aiohttp.ClientTimeout(total=None, sock_read=TURN_TIMEOUT_S)
            async with http.get(events, params={"after": str(last_seq)}, timeout=read) as response:
                if response.status != 200:
                    raise aiohttp.ClientResponseError(response.request_info, (), status=response.status)
                parser = SSEParser()
                async for chunk in response.content.iter_any():
                    for event in parser.feed(chunk):
                        if event.id is None:
                            continue  # a token: live only
                        last_seq = int(event.id)
                        if await _on_run_event(http, url, run_id, last_seq, event.event, event.data, ledger):
                            return
        except (aiohttp.ClientError, TimeoutError, ConnectionError) as exc:
            ledger.errors[f"follow_{type(exc).__name__}"] += 1
        await _pause(stop)


async def _on_run_event(
    http: aiohttp.ClientSession, url: str, run_id: str, seq: int, name: str, data: str, ledger: Ledger
) -> bool:
    """Record an acknowledged step; answer a human request; True at the run's end."""
    if name == "tool.result":
        ledger.steps[run_id][seq] = name
    elif name == "human.requested":
        await answer_request(http, url, run_id, msgspec.json.decode(data))
    elif name in _TERMINAL_RUN:
        if name == "run.completed":
            ledger.runs_completed.add(run_id)
        return True
    return False


async def _pause(stop: asyncio.Event) -> None:
    await wait_event(stop, RETRY_S)
