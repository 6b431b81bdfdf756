"""The load of `agentos bench overload`: `offered` workers posting turns, 3x over the gate.

Each worker has its own session and posts a turn (JSON answer) on a keep-alive connection; an
admitted one holds its connection for the whole turn, a refused one (429) pauses
`retry_pause_ms` and posts again. Stopping is bounded: `stop` ends every loop at its next step,
and `finish` cancels whatever is still running after the grace period.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import msgspec

from agentos.waiting import wait_event, wait_tasks
from agentos_bench.overload.plan import OverloadPlan

_BODY = b'{"input": "tell me something slow"}'
_HEADERS = {"Content-Type": "application/json", "Accept": "application/json"}


@dataclass
class LoadStats:
    completed: int = 0  # 200 with status "completed"
    refused: int = 0  # 429
    turn_outcomes: Counter[str] = field(default_factory=Counter)  # 200s that did not complete, by status
    other: Counter[str] = field(default_factory=Counter)  # other statuses, "error", "timeout"
    turn_s: list[float] = field(default_factory=list)  # the completed turns' durations

    def as_dict(self) -> dict[str, Any]:
        ordered = sorted(self.turn_s)
        median = ordered[len(ordered) // 2] if ordered else None
        return {
            "completed": self.completed,
            "refused": self.refused,
            "turn_outcomes": dict(self.turn_outcomes),
            "other": dict(self.other),
            "completed_turn_s_median": None if median is None else round(median, 3),
        }


class Load:
    def __init__(self, http: aiohttp.ClientSession, base_url: str, sessions: list[str], plan: OverloadPlan) -> None:
        self._http = http
        self._urls = [f"{base_url}/v1/sessions/{s}/turns" for s in sessions]
        self._plan = plan
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.stats = LoadStats()

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._worker(url)) for url in self._urls]

    def stop(self) -> None:
        """No worker posts again; admitted turns finish (`finish`)."""
        self._stop.set()

    async def finish(self, grace_s: float) -> None:
        """Wait up to `grace_s` for the workers, then cancel the rest."""
        if pending := await wait_tasks(self._tasks, grace_s):
            self.stats.other["cancelled_at_end"] += len(pending)

    async def _worker(self, url: str) -> None:
        loop = asyncio.get_running_loop()
        timeout = aiohttp.ClientTimeout(total=self._plan.turn_s + self._plan.request_timeout_s)
        while not self._stop.is_set():
            started = loop.time()
            try:
                async with self._http.post(url, data=_BODY, headers=_HEADERS, timeout=timeout) as response:
                    status, body = response.status, await response.read()
            except TimeoutError:
                self.stats.other["timeout"] += 1
                status, body = 0, b""
            except aiohttp.ClientError:
                self.stats.other["error"] += 1
                status, body = 0, b""
            if status == 200:
                self._answered(body, loop.time() - started)
                continue
            if status == 429:
                self.stats.refused += 1
            elif status:
                self.stats.other[str(status)] += 1
            await self._pause(self._plan.retry_pause_ms / 1000)

    def _answered(self, body: bytes, elapsed_s: float) -> None:
        try:
            outcome = str(msgspec.json.decode(body).get("status"))
        except (msgspec.DecodeError, AttributeError):
            outcome = "not_json"
        if outcome == "completed":
            self.stats.completed += 1
            self.stats.turn_s.append(elapsed_s)
        else:
            self.stats.turn_outcomes[outcome] += 1

    async def _pause(self, seconds: float) -> None:
        await wait_event(self._stop, seconds)
