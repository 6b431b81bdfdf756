"""What one closed-loop turn is, per target: an Agent OS turn over SSE, or one mock completion.

Each `turn()` returns a `TurnSample` and never raises for the server's or the network's failures:
they are classified into a `FailureKind`, because a failed turn is data, not an error of the bench.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import aiohttp
import msgspec

from agentos.mock.chat_stream import DONE_DATA
from agentos.providers.sse_parser import SSEEvent, SSEParser

FailureKind = Literal["429", "5xx", "4xx", "stream_break", "timeout", "connect", "turn_failed", "cancelled"]
FAILURE_KINDS: tuple[FailureKind, ...] = (
    "429",
    "5xx",
    "stream_break",
    "timeout",
    "turn_failed",
    "cancelled",
    "4xx",
    "connect",
)
TERMINAL_EVENTS = {"turn.completed": None, "turn.failed": "turn_failed", "turn.cancelled": "cancelled"}

# What an SSE event means to a turn: "first" (content arrived), "ok" (the turn is done), a failure
# kind (done and failed), or None (keep reading).
EventVerdict = Literal["first", "ok"] | FailureKind | None


@dataclass(frozen=True, slots=True)
class TurnSample:
    started: float  # loop time
    ended: float
    ttft_s: float | None  # None when no content arrived
    failure: FailureKind | None = None
    retry_after_s: float | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None

    @property
    def turn_s(self) -> float:
        return self.ended - self.started


def samples_of(made: TurnSample | tuple[TurnSample, ...]) -> tuple[TurnSample, ...]:
    """What a `Target.turn` returned, as the samples it counts for."""
    return made if isinstance(made, tuple) else (made,)


class Target(Protocol):
    name: str

    async def open_worker(self, http: aiohttp.ClientSession) -> str | None: ...

    async def turn(
        self, http: aiohttp.ClientSession, worker: str | None, timeout_s: float
    ) -> TurnSample | tuple[TurnSample, ...]:
        """One turn's sample, or several (a double text: `load.double_text`), each counted."""
        ...

    async def close_worker(self, http: aiohttp.ClientSession, worker: str | None) -> None: ...


class ServerTarget:
    """Agent OS: one session per worker, `POST /v1/sessions/{id}/turns` streamed as SSE.

    `api_key`: sent as a bearer token on every request, so the sessions and turns are that key's
    tenant's (several targets with different keys drive several tenants in one run); `name`
    labels the rows."""

    def __init__(
        self, base_url: str, turn_input: str = "hello", *, api_key: str | None = None, name: str = "server"
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.name = name
        self._body = msgspec.json.encode({"input": turn_input})
        self._auth = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    async def open_worker(self, http: aiohttp.ClientSession) -> str | None:
        return await create_session(http, self.base_url, headers=self._auth)

    async def turn(self, http: aiohttp.ClientSession, worker: str | None, timeout_s: float) -> TurnSample:
        url = f"{self.base_url}/v1/sessions/{worker}/turns"
        return await timed_stream(http, url, self._body, timeout_s, server_verdict, self._auth)

    async def close_worker(self, http: aiohttp.ClientSession, worker: str | None) -> None:
        await delete_session(http, self.base_url, str(worker), headers=self._auth)


class DirectTarget:
    """The mock provider itself: a turn is one streamed chat completion (the zero-overhead row)."""

    name = "direct"

    def __init__(self, mock_url: str, turn_input: str = "hello") -> None:
        self.url = f"{mock_url.rstrip('/')}/chat/completions"
        self._body = msgspec.json.encode(
            {"model": "mock-1", "stream": True, "messages": [{"role": "user", "content": turn_input}]}
        )

    async def open_worker(self, http: aiohttp.ClientSession) -> str | None:
        return None

    async def turn(self, http: aiohttp.ClientSession, worker: str | None, timeout_s: float) -> TurnSample:
        return await timed_stream(http, self.url, self._body, timeout_s, direct_verdict)

    async def close_worker(self, http: aiohttp.ClientSession, worker: str | None) -> None:
        return None


def server_verdict(event: SSEEvent, seen_first: bool = False) -> EventVerdict:
    if event.event == "token":
        return "first"
    if event.event in TERMINAL_EVENTS:
        return TERMINAL_EVENTS[event.event] or "ok"  # type: ignore[return-value]  # values are FailureKinds
    return None


def direct_verdict(event: SSEEvent, seen_first: bool = False) -> EventVerdict:
    if event.data == DONE_DATA:
        return "ok"
    if seen_first:
        return None  # only the end matters now: skip decoding the rest of the chunks
    chunk: dict[str, Any] = msgspec.json.decode(event.data)
    for choice in chunk.get("choices") or ():
        delta = choice.get("delta") or {}
        if delta.get("content") or delta.get("tool_calls"):
            return "first"
    return None


_DRAIN_TIMEOUT_S = 1.0
_SSE_HEADERS = {"Accept": "text/event-stream", "Content-Type": "application/json"}


async def timed_stream(
    http: aiohttp.ClientSession,
    url: str,
    body: bytes,
    timeout_s: float,
    verdict: Callable[[SSEEvent, bool], EventVerdict],
    headers: dict[str, str] | None = None,
) -> TurnSample:
    """POST `body` (with `headers` besides the SSE ones), read the SSE answer, and time the
    first content and the end."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    state = _StreamState()
    all_headers = _SSE_HEADERS | headers if headers else _SSE_HEADERS
    try:
        async with asyncio.timeout(timeout_s):
            failure, retry_after_s = await _post_and_read(http, url, body, verdict, state, all_headers)
    except TimeoutError:
        failure, retry_after_s = "timeout", None
    except aiohttp.ClientConnectorError:
        failure, retry_after_s = "connect", None
    except (aiohttp.ClientError, ConnectionError, msgspec.DecodeError):
        failure, retry_after_s = "stream_break", None
    return TurnSample(started, state.ended_at or loop.time(), state.ttft(started), failure, retry_after_s)


class _StreamState:
    def __init__(self) -> None:
        self.first_at: float | None = None
        self.ended_at: float | None = None  # the terminal event, before the connection is drained

    def ttft(self, started: float) -> float | None:
        return None if self.first_at is None else self.first_at - started


async def _post_and_read(
    http: aiohttp.ClientSession,
    url: str,
    body: bytes,
    verdict: Callable[[SSEEvent, bool], EventVerdict],
    state: _StreamState,
    headers: dict[str, str],
) -> tuple[FailureKind | None, float | None]:
    async with http.post(url, data=body, headers=headers) as response:
        if response.status != 200:
            await response.read()
            return status_failure(response.status), retry_after(response.headers.get("Retry-After"))
        parser = SSEParser()
        loop = asyncio.get_running_loop()
        async for chunk in response.content.iter_any():
            for event in parser.feed(chunk):
                result = verdict(event, state.first_at is not None)
                if result == "first":
                    state.first_at = state.first_at or loop.time()
                elif result is not None:
                    state.ended_at = loop.time()
                    await _drain(response)
                    return (None if result == "ok" else result), None
    return "stream_break", None


async def _drain(response: aiohttp.ClientResponse) -> None:
    """Read to the end of the body, so the connection goes back to the pool instead of being closed.

    The end is timed at the terminal event; this only consumes the chunked terminator behind it.
    """
    try:
        async with asyncio.timeout(_DRAIN_TIMEOUT_S):
            await response.content.read()
    except TimeoutError:
        response.close()  # a server that keeps the stream open after its terminal event


def status_failure(status: int) -> FailureKind:
    if status == 429:
        return "429"
    return "5xx" if status >= 500 else "4xx"


def retry_after(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None  # an HTTP date: the bench then backs off by its default


async def create_session(
    http: aiohttp.ClientSession, base_url: str, attempts: int = 5, headers: dict[str, str] | None = None
) -> str:
    """`POST /v1/sessions` → the new session's id (a few bounded retries on 429/5xx).

    Raises:
        RuntimeError: the server would not create a session.
    """
    last = ""
    for attempt in range(attempts):
        async with http.post(f"{base_url}/v1/sessions", json={}, headers=headers) as response:
            text = await response.text()
            if response.status in (200, 201):
                data: dict[str, Any] = msgspec.json.decode(text)
                return str(data.get("id") or data.get("session_id"))
            last = f"{response.status} {text[:200]!r}"
        await asyncio.sleep(min(0.2 * 2**attempt, 2.0))
    raise SessionSetupError(f"could not create a session at {base_url!r}: {last}")


class SessionSetupError(RuntimeError):
    """The server refused to create a bench session."""


async def delete_session(
    http: aiohttp.ClientSession, base_url: str, session_id: str, headers: dict[str, str] | None = None
) -> int:
    """`DELETE /v1/sessions/{id}`; returns the status (errors are the server's, not ours)."""
    try:
        async with http.delete(f"{base_url}/v1/sessions/{session_id}", headers=headers) as response:
            await response.read()
            return response.status
    except (aiohttp.ClientError, TimeoutError):
        return 0
