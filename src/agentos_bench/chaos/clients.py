"""The chaos campaign's clients: chat users and agent runs spread over the nodes, recording what
each was told, by whom, when, and how long each answer took to begin.

A user sends its turns one after another, each to the node after its previous turn's (no
affinity: the hard case for last-wins across nodes); after a failure it goes on with the next
node. A turn is acknowledged when its client saw `turn.completed`. A run is started on one node
and followed on it, and from the next node (after the last event seen) whenever its stream
breaks; its human questions are answered where it is followed. Every answer's status and
`Retry-After` are counted under the campaign's phase of the moment (`Ledger.phase`), and an
answer that took longer than `HANG_S` to begin (or never began) is a hang. Every loop is bounded
by the campaign's stop flag and by per-request timeouts.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import aiohttp
import msgspec

from agentos.providers.sse_parser import SSEParser
from agentos.waiting import wait_event
from agentos_bench.runs.client import answer_pending, answer_request

RETRY_S = 0.2
HANG_S = 15.0  # beyond every bound the server documents for a request (store 2 s + 10 s, Redis 0.5 s)
TURN_TIMEOUT_S = 120.0  # a whole turn stream: the provider limit may queue it behind others
QUIET_S = 5.0  # a run's event stream silent this long: look at the run again
_TERMINAL_TURN = ("turn.completed", "turn.failed", "turn.cancelled")
_TERMINAL_RUN = ("run.completed", "run.failed", "run.cancelled")
Failure = (aiohttp.ClientError, TimeoutError, ConnectionError)
_ANSWER_TIMEOUT_S = 15.0  # an answer may meet a node busy recovering from the fault


@dataclass(slots=True)
class Turn:
    """One turn a user sent: `text` is unique (`user <n> turn <k>`), so the transcript names it."""

    session_id: str
    index: int  # 1, 2, ... in the order the user sent them
    text: str
    phase: str
    node: int
    outcome: str = "unanswered"  # completed | failed:<reason> | http_<status> | error:<name>
    turn_id: str | None = None


@dataclass(slots=True)
class Run:
    run_id: str
    phase: str
    node: int
    acknowledged: dict[int, str] = field(default_factory=dict)  # seq -> event type the client saw
    end_seen: str | None = None  # the terminal event the client saw
    last_seq: int = 0  # the last event seen: a stream read again resumes after it
    open_in: set[str] = field(default_factory=set)  # the phases it was open in (a run taken over in a fault)


@dataclass(slots=True)
class Ledger:
    phase: str = "warm-up"
    turns: list[Turn] = field(default_factory=list)
    runs: dict[str, Run] = field(default_factory=dict)
    statuses: Counter[tuple[str, int]] = field(default_factory=Counter)  # (phase, HTTP status)
    retry_after: Counter[str] = field(default_factory=Counter)  # phase -> 503s that carried Retry-After
    hangs: Counter[str] = field(default_factory=Counter)  # phase -> answers that began after HANG_S, or never
    errors: Counter[tuple[str, str]] = field(default_factory=Counter)  # (phase, what)

    def enter(self, phase: str) -> None:
        """A new phase: the runs still open are open in it too."""
        self.phase = phase
        for run in self.runs.values():
            if run.end_seen is None:
                run.open_in.add(phase)

    def answered(self, response: aiohttp.ClientResponse, began: float) -> None:
        self.statuses[(self.phase, response.status)] += 1
        if response.status == 503 and response.headers.get("Retry-After"):
            self.retry_after[self.phase] += 1
        if time.perf_counter() - began > HANG_S:
            self.hangs[self.phase] += 1

    def failed(self, what: str, exc: BaseException) -> None:
        self.errors[(self.phase, f"{what}_{type(exc).__name__}")] += 1
        if isinstance(exc, TimeoutError):
            self.hangs[self.phase] += 1


async def user_loop(
    http: aiohttp.ClientSession, urls: Sequence[str], ledger: Ledger, stop: asyncio.Event, n: int
) -> None:
    """One user: a session, then turns one after another until `stop`, each on the next node."""
    session_id: str | None = None
    node, k = n % len(urls), 0
    while not stop.is_set():
        url, node = urls[node], (node + 1) % len(urls)
        completed = False
        try:
            if session_id is None:
                session_id = await _new_session(http, url, ledger)
            if session_id is not None:
                k += 1
                turn = Turn(session_id, k, f"user {n} turn {k}", ledger.phase, urls.index(url))
                ledger.turns.append(turn)
                await _one_turn(http, url, turn, ledger)
                completed = turn.outcome == "completed"
        except Failure as exc:
            ledger.failed("turn", exc)
        if not completed:
            await _pause(stop)


async def _new_session(http: aiohttp.ClientSession, url: str, ledger: Ledger) -> str | None:
    began = time.perf_counter()
    async with http.post(f"{url}/v1/sessions", json={}, timeout=aiohttp.ClientTimeout(total=30)) as response:
        ledger.answered(response, began)
        body = await response.json(content_type=None)
        return str(body["id"]) if response.status == 201 else None


async def _one_turn(http: aiohttp.ClientSession, url: str, turn: Turn, ledger: Ledger) -> None:
    began = time.perf_counter()
    timeout = aiohttp.ClientTimeout(total=TURN_TIMEOUT_S)
    try:
        async with http.post(
            f"{url}/v1/sessions/{turn.session_id}/turns",
            json={"input": turn.text},
            headers={"Accept": "text/event-stream"},
            timeout=timeout,
        ) as response:
            ledger.answered(response, began)
            if response.status != 200:
                await response.read()
                turn.outcome = f"http_{response.status}"
                return
            await _read_turn(response, turn)
    except Failure as exc:
        turn.outcome = f"error:{type(exc).__name__}"
        raise


async def _read_turn(response: aiohttp.ClientResponse, turn: Turn) -> None:
    parser = SSEParser()
    async for chunk in response.content.iter_any():
        for event in parser.feed(chunk):
            if event.event in _TERMINAL_TURN:
                data = msgspec.json.decode(event.data)
                turn.turn_id = str(data.get("turn_id") or turn.turn_id)
                reason = data.get("reason") or data.get("error", {}).get("code", "")
                turn.outcome = "completed" if event.event == "turn.completed" else f"{event.event[5:]}:{reason}"
            elif event.event == "turn.started":
                turn.turn_id = str(msgspec.json.decode(event.data)["turn_id"])


async def run_loop(
    http: aiohttp.ClientSession, urls: Sequence[str], agent: str, ledger: Ledger, stop: asyncio.Event, n: int
) -> None:
    """One automation: runs one after another until `stop`, each followed (across nodes) to its
    end, the last one too (the campaign's drain cancels a follower past its bound)."""
    node, j = n % len(urls), 0
    while not stop.is_set():
        url, node = urls[node], (node + 1) % len(urls)
        j += 1
        try:
            run = await _start_run(http, url, agent, f"job {n}.{j}", ledger)
        except Failure as exc:
            ledger.failed("run_start", exc)
            run = None
        if run is None:
            await _pause(stop)
            continue
        run.node = urls.index(url)
        await follow_run(http, urls, run, ledger)


async def _start_run(http: aiohttp.ClientSession, url: str, agent: str, text: str, ledger: Ledger) -> Run | None:
    began = time.perf_counter()
    async with http.post(
        f"{url}/v1/agents/{agent}/runs", json={"input": text}, timeout=aiohttp.ClientTimeout(total=30)
    ) as response:
        ledger.answered(response, began)
        body = await response.json(content_type=None)
        if response.status != 202:
            return None
        run = Run(str(body["run_id"]), ledger.phase, 0, open_in={ledger.phase})
        ledger.runs[run.run_id] = run
        return run


async def follow_run(http: aiohttp.ClientSession, urls: Sequence[str], run: Run, ledger: Ledger) -> None:
    """Follow the run's events from its node, then from the next node after each break, until its
    end (bounded by the campaign, which cancels the follower past its drain)."""
    node = run.node
    while run.end_seen is None:
        url = urls[node]
        try:
            if run.last_seq:  # a question asked before a break (or answered in vain) is asked again
                await answer_pending(http, url, run.run_id, _ANSWER_TIMEOUT_S)
            await _events(http, url, run, ledger)
        except TimeoutError:
            ledger.errors[(ledger.phase, "follow_quiet")] += 1  # a run waiting: no hang, look again
            continue
        except Failure as exc:
            ledger.failed("follow", exc)
        if run.end_seen is None:
            node = (node + 1) % len(urls)
            await asyncio.sleep(RETRY_S)


async def _events(http: aiohttp.ClientSession, url: str, run: Run, ledger: Ledger) -> None:
    """Read the run's events after `run.last_seq` until its end, a break, or `QUIET_S` without one
    (TimeoutError: a question answered in vain during a fault leaves a run waiting, silently)."""
    read = aiohttp.ClientTimeout(total=None, sock_connect=5, sock_read=QUIET_S)
    began = time.perf_counter()
    async with http.get(
        f"{url}/v1/runs/{run.run_id}/events", params={"after": str(run.last_seq)}, timeout=read
    ) as response:
        ledger.answered(response, began)
        if response.status != 200:
            await response.read()
            return
        parser = SSEParser()
        async for chunk in response.content.iter_any():
            for event in parser.feed(chunk):
                if event.id is None:
                    continue  # a token: live only
                run.last_seq = int(event.id)
                if await _on_event(http, url, run, run.last_seq, event.event, event.data):
                    return


async def _on_event(http: aiohttp.ClientSession, url: str, run: Run, seq: int, name: str, data: str) -> bool:
    """Record an acknowledged step; answer a human request; True at the run's end."""
    if name == "tool.result":
        run.acknowledged[seq] = name
    elif name == "human.requested":
        await answer_request(http, url, run.run_id, msgspec.json.decode(data), _ANSWER_TIMEOUT_S)
    elif name in _TERMINAL_RUN:
        run.end_seen = name
        return True
    return False


async def _pause(stop: asyncio.Event) -> None:
    await wait_event(stop, RETRY_S)
