"""What one step of the staircase adds to the server, for each workload (`--workload`).

- `idle`: a session opened, no turn (`POST /v1/sessions`).
- `turn`: a session with one completed turn (the staircase's first workload).
- `waiting`: an agent run parked on a human: the `runs` profile's agent on the mock's `tools`
  scenario runs two commands, then asks; the step ends when `GET /v1/runs/{id}` says
  `waiting_human` (bounded). Released by answering every run and waiting for their ends.
- `sandbox`: ready sandboxes (`sandbox.ready_sandboxes`), which a server makes at its start: one
  server per point of the staircase (`agentos_bench.memory.sandboxes`).

Each `Items` pays the one-time costs with a throwaway item (`prepare`), then adds one item per
`add` and says whether it worked; `release` empties the server again and returns its marks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import aiohttp

from agentos_bench.load.targets import ServerTarget, delete_session
from agentos_bench.runs.client import RunTarget, answer_run, drive_run, start_run, terminate_run
from agentos_bench.runs.probes import TERMINAL_STATUSES, poll_until

WORKLOADS = {
    "idle": "idle session (opened, no turn)",
    "turn": "session with one completed turn",
    "waiting": "agent run waiting for a human",
    "sandbox": "ready sandbox",
}
# A few deletes at a time: 500 at once leave 7 MB of request buffers behind in the server
# (measured, 2026-12-06), which the reclaim after the TTL would then be judged by.
_DELETES_AT_ONCE = 8
RUNS_PROFILE = "runs"  # the agent `bench` with run_command and ask_human (agentos_bench/profiles/runs.toml)

Sample = Callable[..., Awaitable[dict[str, Any]]]  # (**extra) -> one sample of the server


class Items(Protocol):
    async def prepare(self, http: aiohttp.ClientSession) -> None: ...

    async def add(self, http: aiohttp.ClientSession) -> bool: ...

    async def release(self, http: aiohttp.ClientSession, sample: Sample) -> dict[str, dict[str, Any]]: ...


class Sessions:
    """Sessions, idle (`turn=False`) or with one completed turn. Released: half deleted, the
    rest left to the TTL reaper (`wait_expired`)."""

    def __init__(self, base_url: str, *, turn: bool, ttl_s: float, settle_s: float, input_bytes: int = 0) -> None:
        self.target = ServerTarget(base_url, turn_input(input_bytes))
        self.turn, self.ttl_s, self.settle_s = turn, ttl_s, settle_s
        self.ids: list[str] = []

    async def _one(self, http: aiohttp.ClientSession) -> tuple[str, bool]:
        session_id = str(await self.target.open_worker(http))
        if not self.turn:
            return session_id, session_id != "None"
        return session_id, (await self.target.turn(http, session_id, timeout_s=30.0)).ok

    async def prepare(self, http: aiohttp.ClientSession) -> None:
        throwaway, _ = await self._one(http)
        await delete_session(http, self.target.base_url, throwaway)

    async def add(self, http: aiohttp.ClientSession) -> bool:
        session_id, ok = await self._one(http)
        self.ids.append(session_id)
        return ok

    async def release(self, http: aiohttp.ClientSession, sample: Sample) -> dict[str, dict[str, Any]]:
        half, url = len(self.ids) // 2, self.target.base_url
        gate = asyncio.Semaphore(_DELETES_AT_ONCE)

        async def delete(session_id: str) -> None:
            async with gate:
                await delete_session(http, url, session_id)

        await asyncio.gather(*(delete(s) for s in self.ids[:half]))
        await asyncio.sleep(self.settle_s)
        marks = {"after_delete": await sample(sessions_deleted=half)}
        await wait_expired(http, url, deadline_s=self.ttl_s * 2 + 15.0)
        await asyncio.sleep(self.settle_s)
        marks["after_ttl"] = await sample(sessions_left_to_expire=len(self.ids) - half)
        return marks


def turn_input(size: int) -> str:
    """A turn's input of `size` bytes of words (0: "hello"): sessions whose transcript holds more."""
    return ("lorem ipsum dolor sit amet " * (size // 27 + 1))[:size] if size > 0 else "hello"


class WaitingRuns:
    """Agent runs parked on a human. Released: every run answered and followed to its end."""

    def __init__(self, base_url: str, *, timeout_s: float, settle_s: float) -> None:
        self.target, self.timeout_s, self.settle_s = RunTarget(base_url), timeout_s, settle_s
        self.waiting: dict[str, str] = {}  # run id -> the operation its question waits on

    async def prepare(self, http: aiohttp.ClientSession) -> None:
        await drive_run(http, self.target, answer_delay_s=0.0, timeout_s=self.timeout_s)

    async def add(self, http: aiohttp.ClientSession) -> bool:
        run_id, _ = await start_run(http, self.target)
        if run_id is None:
            return False
        settled = await poll_until(http, self.target.base_url, [run_id], _settled, self.timeout_s)
        run = settled.get(run_id)
        if run is None or run.get("status") != "waiting_human":
            await terminate_run(http, self.target.base_url, run_id)
            return False
        self.waiting[run_id] = str(run["pending"]["operation_id"])
        return True

    async def release(self, http: aiohttp.ClientSession, sample: Sample) -> dict[str, dict[str, Any]]:
        url = self.target.base_url
        answered = sum(await asyncio.gather(*(answer_run(http, url, r, op) for r, op in self.waiting.items())))
        ended = await poll_until(http, url, list(self.waiting), _ended, self.timeout_s)
        await asyncio.sleep(self.settle_s)
        return {"after_end": await sample(runs_answered=answered, runs_ended=len(ended))}


def _settled(run: dict[str, Any]) -> bool:
    return run.get("status") in ("waiting_human", *TERMINAL_STATUSES)


def _ended(run: dict[str, Any]) -> bool:
    return run.get("status") in TERMINAL_STATUSES


async def wait_expired(http: aiohttp.ClientSession, base_url: str, deadline_s: float) -> None:
    """Poll the server's `agentos_active_sessions` once a second until it is 0 (bounded)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + deadline_s
    while loop.time() < deadline:
        if (await server_gauges(http, base_url)).get("agentos_active_sessions", 0.0) == 0.0:
            return
        await asyncio.sleep(1.0)


_GAUGES = ("agentos_active_sessions", "agentos_sessions_evicted_total", "agentos_sandbox_ready")


async def server_gauges(http: aiohttp.ClientSession, base_url: str) -> dict[str, float]:
    """The server's own counters from `GET /metrics` (read-only; not counted as activity)."""
    try:
        async with http.get(f"{base_url}/metrics") as response:
            text = await response.text()
    except (aiohttp.ClientError, TimeoutError):
        return {}
    return parse_gauges(text, _GAUGES)


def parse_gauges(text: str, names: tuple[str, ...]) -> dict[str, float]:
    """Unlabelled samples named in `names` from Prometheus text (the first of each)."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in names and name not in found:
            try:
                found[name] = float(value.split()[0])
            except (ValueError, IndexError):
                continue
    return found
