"""The bench's client of one agent run: start it, follow its events, answer the human, time it.

Usage::

    async with bench_http_session() as http:
        outcome = await drive_run(http, RunTarget(base_url, agent="bench"), answer_delay_s=1.0, timeout_s=120.0)

`drive_run` times the start call (`POST /v1/agents/{name}/runs`, the start-API latency), then
follows `GET /v1/runs/{id}/events` on one SSE connection, answers each `human.requested` after
`answer_delay_s` (in a task of its own, so the stream keeps being read), and ends at the terminal
event, then reads the stream to its end. Duration is from sending the start call to receiving the
terminal event; the time between consecutive events is filed by phase (`PHASE_ENDED_BY`). Nothing
here raises: every failure becomes a kind in the outcome (`FAILURE_KINDS`).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import msgspec

from agentos.providers.sse_parser import SSEParser

TERMINAL_EVENTS = {"run.completed": None, "run.failed": "run_failed", "run.cancelled": "run_cancelled"}
FAILURE_KINDS = (
    "start_429",
    "start_5xx",
    "start_4xx",
    "start_error",
    "events_http",
    "stream_break",
    "answer_error",
    "timeout",
    "run_failed",
    "run_cancelled",
)
_DRAIN_TIMEOUT_S = 5.0
# The phase that ends with an event: what the run was doing since the previous (non-token) event.
PHASE_ENDED_BY = {
    "run.started": "queued",  # from sending the start call
    "tool.call": "model_call",
    "human.requested": "model_call",  # ask_human is announced by its request, not by a tool.call
    "run.completed": "model_call",
    "tool.result": "tool",
    "human.answered": "human_wait",  # includes the answer delay
}


@dataclass(frozen=True, slots=True)
class RunTarget:
    base_url: str  # http://127.0.0.1:PORT
    agent: str = "bench"
    run_input: str = "bench run"


@dataclass(slots=True)
class RunOutcome:
    """What the bench saw of one run."""

    run_id: str | None = None
    start_s: float | None = None  # latency of the start call
    duration_s: float | None = None  # start call sent -> terminal event received (completed runs only)
    failure: str | None = None  # one of FAILURE_KINDS
    tool_results: int = 0
    human_answers: int = 0  # `human.answered` events seen
    approvals: int = 0  # of the human requests, approvals of a tool call (answered with its args_hash)
    phases: dict[str, list[float]] = field(default_factory=dict)  # phase -> seconds, from event arrival times

    @property
    def ok(self) -> bool:
        return self.failure is None and self.duration_s is not None


async def start_run(http: aiohttp.ClientSession, target: RunTarget) -> tuple[str | None, str | None]:
    """`(run_id, None)` or `(None, failure kind)`."""
    url = f"{target.base_url}/v1/agents/{target.agent}/runs"
    try:
        async with http.post(url, json={"input": target.run_input}) as response:
            body = await response.read()
            if response.status != 202:
                return None, _start_failure(response.status)
    except (aiohttp.ClientError, TimeoutError):
        return None, "start_error"
    return str(msgspec.json.decode(body)["run_id"]), None


def _start_failure(status: int) -> str:
    if status == 429:
        return "start_429"
    return "start_5xx" if status >= 500 else "start_4xx"


async def answer_run(
    http: aiohttp.ClientSession, base_url: str, run_id: str, operation_id: str, args_hash: str | None = None
) -> bool:
    """Answer a question, or approve a tool call by quoting its `args_hash` (an approval binds to
    exactly the arguments asked about); True on 200."""
    url = f"{base_url}/v1/runs/{run_id}/answer"
    body: dict[str, Any] = {"operation_id": operation_id, "answer": "yes"}
    if args_hash is not None:
        body |= {"approve": True, "args_hash": args_hash}
    try:
        async with http.post(url, json=body) as response:
            await response.read()
            return response.status == 200
    except (aiohttp.ClientError, TimeoutError):
        return False


async def terminate_run(http: aiohttp.ClientSession, base_url: str, run_id: str) -> None:
    """Hard-stop a run the bench gave up on, so the next point starts clean (errors ignored)."""
    with contextlib.suppress(aiohttp.ClientError, TimeoutError):
        async with http.post(f"{base_url}/v1/runs/{run_id}/terminate") as response:
            await response.read()


async def get_run(http: aiohttp.ClientSession, base_url: str, run_id: str) -> dict[str, Any] | None:
    """The run's JSON, or None when it cannot be read."""
    try:
        async with http.get(f"{base_url}/v1/runs/{run_id}") as response:
            if response.status != 200:
                return None
            data: dict[str, Any] = msgspec.json.decode(await response.read())
            return data
    except (aiohttp.ClientError, TimeoutError):
        return None


async def drive_run(
    http: aiohttp.ClientSession, target: RunTarget, *, answer_delay_s: float, timeout_s: float
) -> RunOutcome:
    """Start one run and follow it to its end (bounded by `timeout_s`); terminate it on a timeout."""
    loop = asyncio.get_running_loop()
    outcome = RunOutcome()
    sent = loop.time()
    run_id, failure = await start_run(http, target)
    outcome.start_s = loop.time() - sent
    if run_id is None:
        outcome.failure = failure
        return outcome
    outcome.run_id = run_id
    follower = _Follower(http, target.base_url, run_id, outcome, answer_delay_s)
    follower.last_event_at = sent  # the `queued` phase starts when the start call is sent
    try:
        await asyncio.wait_for(follower.follow(), max(0.0, timeout_s - outcome.start_s))
    except TimeoutError:
        outcome.failure = outcome.failure or "timeout"
        await terminate_run(http, target.base_url, run_id)
    finally:
        await follower.close()
    if outcome.failure is None:
        outcome.duration_s = follower.ended_at - sent
    return outcome


async def _drain(response: aiohttp.ClientResponse) -> None:
    """Read the stream to its end (the server ends it after the terminal event), so the server
    finishes its response instead of finding the connection cut; bounded, errors ignored."""
    with contextlib.suppress(aiohttp.ClientError, TimeoutError):
        await asyncio.wait_for(response.read(), _DRAIN_TIMEOUT_S)


class _Follower:
    """Reads one run's SSE stream; answers questions after the delay."""

    def __init__(
        self, http: aiohttp.ClientSession, base_url: str, run_id: str, outcome: RunOutcome, answer_delay_s: float
    ) -> None:
        self._http, self._base_url, self._run_id = http, base_url, run_id
        self._outcome, self._answer_delay_s = outcome, answer_delay_s
        self._answers: set[asyncio.Task[None]] = set()
        self.ended_at = 0.0
        self.last_event_at = asyncio.get_running_loop().time()

    async def follow(self) -> None:
        url = f"{self._base_url}/v1/runs/{self._run_id}/events"
        try:
            async with self._http.get(url, headers={"Accept": "text/event-stream"}) as response:
                if response.status != 200:
                    self._outcome.failure = "events_http"
                    return
                if await self._read(response):
                    await _drain(response)
                    return
        except (aiohttp.ClientError, TimeoutError):
            pass
        self._outcome.failure = self._outcome.failure or "stream_break"

    async def _read(self, response: aiohttp.ClientResponse) -> bool:
        """True once the terminal event arrived."""
        parser = SSEParser()
        async for chunk in response.content.iter_any():
            for event in parser.feed(chunk):
                if self._on_event(event.event, event.data):
                    return True
        return False

    def _on_event(self, name: str, data: str) -> bool:
        self._mark(name)
        if name == "tool.result":
            self._outcome.tool_results += 1
        elif name == "human.answered":
            self._outcome.human_answers += 1
        elif name == "human.requested":
            request = msgspec.json.decode(data)
            args_hash = str(request["args_hash"]) if request.get("kind") == "approval" else None
            self._outcome.approvals += args_hash is not None
            task = asyncio.create_task(self._answer(str(request["operation_id"]), args_hash))
            self._answers.add(task)
            task.add_done_callback(self._answers.discard)
        elif name in TERMINAL_EVENTS:
            self.ended_at = asyncio.get_running_loop().time()
            self._outcome.failure = self._outcome.failure or TERMINAL_EVENTS[name]
            return True
        return False

    def _mark(self, name: str) -> None:
        phase = PHASE_ENDED_BY.get(name)
        if phase is None:
            return
        now = asyncio.get_running_loop().time()
        self._outcome.phases.setdefault(phase, []).append(now - self.last_event_at)
        self.last_event_at = now

    async def _answer(self, operation_id: str, args_hash: str | None) -> None:
        await asyncio.sleep(self._answer_delay_s)  # the human thinking: a measured part of the run
        if not await answer_run(self._http, self._base_url, self._run_id, operation_id, args_hash):
            self._outcome.failure = self._outcome.failure or "answer_error"

    async def close(self) -> None:
        """Cancel answers still waiting (a run that ended or timed out needs none)."""
        for task in list(self._answers):
            task.cancel()
        await asyncio.gather(*self._answers, return_exceptions=True)


# The fault campaigns' human and reader: they follow runs across crashes and cuts.


async def answer_pending(http: aiohttp.ClientSession, url: str, run_id: str, timeout_s: float = 10.0) -> None:
    """Answer the run's pending human request, if it has one (after a break in its stream)."""
    async with http.get(f"{url}/v1/runs/{run_id}", timeout=aiohttp.ClientTimeout(total=timeout_s)) as response:
        if response.status != 200:
            return
        row: dict[str, Any] = await response.json()
    if row.get("pending"):
        await answer_request(http, url, run_id, row["pending"], timeout_s)


async def answer_request(
    http: aiohttp.ClientSession, url: str, run_id: str, pending: dict[str, Any], timeout_s: float = 10.0
) -> None:
    """Yes to a question or an approval; `skip` for a step a fault left uncertain (a retry could
    repeat its effect at the human's request, which is no duplicate of the server's making)."""
    answer: dict[str, Any] = {"operation_id": pending["operation_id"], "answer": "yes"}
    if pending.get("kind") == "approval":
        answer |= {"approve": True, "args_hash": pending.get("args_hash")}
    elif pending.get("kind") == "uncertain":
        answer["answer"] = "skip"
    # refused or lost (a crash, a cut): asked again after the next break in the stream
    with contextlib.suppress(aiohttp.ClientError, TimeoutError, ConnectionError):
        async with http.post(
            f"{url}/v1/runs/{run_id}/answer", json=answer, timeout=aiohttp.ClientTimeout(total=timeout_s)
        ) as response:
            await response.read()


async def stored_events(http: aiohttp.ClientSession, url: str, run_id: str) -> list[tuple[int, str, dict[str, Any]]]:
    """(seq, type, data) of the run's stored events, read until the stream ends or pauses for 2 s
    (a run that has not ended keeps its stream open)."""
    found: list[tuple[int, str, dict[str, Any]]] = []
    with contextlib.suppress(TimeoutError):
        async with http.get(
            f"{url}/v1/runs/{run_id}/events", timeout=aiohttp.ClientTimeout(total=None, sock_read=2.0)
        ) as response:
            parser = SSEParser()
            async for chunk in response.content.iter_any():
                for event in parser.feed(chunk):
                    if event.id is not None:
                        found.append((int(event.id), event.event, msgspec.json.decode(event.data)))
    return found
