"""The crash storm: `kills` times kill -9 of the server at random moments while `users` chat
users and `automations` agent runs keep going, restarting it each time on the same data.

At the end (the server started once more, the clients stopped): every acknowledged turn must
have its completed answer in the transcript (`lost` otherwise) exactly once (`duplicated`
otherwise); every acknowledged run step must be in its run's journal with the same event
(`lost`), and no run's workspace may hold an effect twice (`duplicated`: the tools scenario's
commands append a line per step to `effects.log`); after a clean stop, every SQLite file passes
`PRAGMA integrity_check`. Time to ready: from each restart's spawn to `/readyz` answering 200.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import sqlite3
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import aiohttp

from agentos.waiting import wait_tasks
from agentos_bench.common.processes import Child, ServerPlan, start_server_process, stop_child
from agentos_bench.faults.clients import Ledger, run_loop, turn_loop
from agentos_bench.report.stats import percentiles_ms
from agentos_bench.runs.client import stored_events

AGENT = "storm"


@dataclass(frozen=True, kw_only=True)
class StormPlan:
    kills: int = 20
    users: int = 50
    automations: int = 10
    gap_s: tuple[float, float] = (1.0, 3.0)  # the time between kills, drawn uniformly
    settle_s: float = 2.0  # load after the last restart, before the clients stop
    seed: int = 1


async def crash_storm(plan: StormPlan, server_plan: ServerPlan, log_dir: Path) -> dict[str, Any]:
    ledger, stop = Ledger(), asyncio.Event()
    rng = random.Random(plan.seed)
    ready_s: list[float] = []
    server = await start_server_process(server_plan, log_dir)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as http:
        await _create_agent(http, server.url)
        url = server.url
        clients = [asyncio.create_task(turn_loop(http, url, ledger, stop, n)) for n in range(plan.users)]
        clients += [asyncio.create_task(run_loop(http, url, AGENT, ledger, stop, n)) for n in range(plan.automations)]
        try:
            for _ in range(plan.kills):
                await asyncio.sleep(rng.uniform(*plan.gap_s))
                server = await _kill_and_restart(server, server_plan, log_dir, url, ready_s)
            await asyncio.sleep(plan.settle_s)
        finally:
            stop.set()
            await wait_tasks(clients, 35)
        check = await _verify(http, server.url, ledger, server_plan.data_dir)
    await stop_child(server.process)
    return {
        "kills": plan.kills,
        "users": plan.users,
        "automations": plan.automations,
        "seed": plan.seed,
        "acknowledged_turns": sum(len(t) for t in ledger.turns.values()),
        "acknowledged_steps": sum(len(s) for s in ledger.steps.values()),
        "runs_completed": len(ledger.runs_completed),
        "client_errors": dict(sorted(ledger.errors.items())),
        "time_to_ready_ms": percentiles_ms(ready_s) | {"max": round(max(ready_s) * 1000, 1) if ready_s else None},
        "integrity": _integrity(server_plan.data_dir),
        **check,
    }


async def _create_agent(http: aiohttp.ClientSession, url: str) -> None:
    async with http.post(f"{url}/v1/agents", json={"name": AGENT}) as response:
        if response.status not in (200, 201):
            raise RuntimeError(f"POST /v1/agents: {response.status} {await response.text()}")


async def _kill_and_restart(server: Child, plan: ServerPlan, log_dir: Path, url: str, ready_s: list[float]) -> Child:
    with contextlib.suppress(ProcessLookupError):
        os.kill(server.pid, signal.SIGKILL)
    await server.process.wait()
    port = int(url.rsplit(":", 1)[1])
    started = time.perf_counter()
    plan = replace(plan, log_name=f"server-restart-{len(ready_s) + 1}")  # each start keeps its own log
    restarted = await start_server_process(plan, log_dir, port=port)  # the same address: the clients carry on
    ready_s.append(time.perf_counter() - started)
    return restarted


async def _verify(http: aiohttp.ClientSession, url: str, ledger: Ledger, data_dir: Path) -> dict[str, Any]:
    lost_turns = duplicated_turns = 0
    for session_id, acknowledged in ledger.turns.items():
        answers = Counter(
            m["turn_id"]
            for m in await _all(http, f"{url}/v1/sessions/{session_id}/messages")
            if m["role"] == "assistant" and m.get("status") == "completed"
        )
        lost_turns += sum(1 for turn_id in acknowledged if answers[turn_id] == 0)
        duplicated_turns += sum(1 for count in answers.values() if count > 1)
    lost_steps = 0
    for run_id, steps in ledger.steps.items():
        if steps:
            journal = await _run_events(http, url, run_id)
            lost_steps += sum(1 for seq, name in steps.items() if journal.get(seq) != name)
    duplicated_effects = sum(_repeated_lines(path) for path in (data_dir / "workspaces").glob("*/effects.log"))
    return {
        "lost_turns": lost_turns,
        "duplicated_turns": duplicated_turns,
        "lost_steps": lost_steps,
        "duplicated_effects": duplicated_effects,
        "terminal_events_per_stream": {str(k): v for k, v in sorted(ledger.terminal_counts.items())},
    }


async def _all(http: aiohttp.ClientSession, url: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    after: Any = None
    while True:
        params = {"limit": "1000"} | ({"after": str(after)} if after else {})
        async with http.get(url, params=params) as response:
            page = await response.json()
        found += page["data"]
        after = page.get("next_cursor")
        if not after or not page["data"]:
            return found


async def _run_events(http: aiohttp.ClientSession, url: str, run_id: str) -> dict[int, str]:
    """seq -> event type of the run's stored events."""
    return {seq: name for seq, name, _ in await stored_events(http, url, run_id)}


def _repeated_lines(path: Path) -> int:
    lines = Counter(path.read_text().splitlines())
    return sum(count - 1 for count in lines.values() if count > 1)


def _integrity(data_dir: Path) -> dict[str, str]:
    results = {}
    for path in sorted(data_dir.glob("*.db")):
        connection = sqlite3.connect(path)
        try:
            results[path.name] = str(connection.execute("PRAGMA integrity_check").fetchone()[0])
        finally:
            connection.close()
    return results
