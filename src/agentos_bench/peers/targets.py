"""What one closed-loop turn is on a peer: the same `Target` the sweep drives Agent OS with.

- Agno AgentOS: `POST /agents/bench/runs` (form fields `message`, `stream=true`, `session_id`),
  answered as SSE: `RunContent` is content, `RunCompleted` the end (`RunError`, `RunCancelled`:
  failed). A worker's session id is made here; Agno creates the session on its first run.
- opencode: `POST /session` opens a worker's session; a turn is `POST /session/{id}/message`,
  answered with the whole assistant message when it is done. The content streams on the server's
  one event stream (`GET /event`, every session's events): the arrival of the first
  `message.part.delta` of the assistant message the answer names is the turn's first token (what
  opencode's own clients show). One reader serves every worker.
- LangGraph Server: `POST /threads` opens a worker's thread; a turn is
  `POST /threads/{id}/runs/stream` with `stream_mode` `messages-tuple` and `values` (what
  LangGraph's `useStream` client asks for), answered as SSE: the first `messages` event with
  content is the first token, the `values` event after it (the thread's state once the run is
  done) the end, `error` a failed run.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any, Protocol
from urllib.parse import urlencode

import aiohttp
import msgspec

from agentos.providers.sse_parser import SSEEvent, SSEParser
from agentos_bench.load.targets import EventVerdict, FailureKind, Target, TurnSample, status_failure, timed_stream

_AGNO_TERMINAL: dict[str, EventVerdict] = {"RunCompleted": "ok", "RunError": "turn_failed", "RunCancelled": "cancelled"}
_FORM = {"Content-Type": "application/x-www-form-urlencoded"}
_LANGGRAPH_STREAM_MODES = ["messages-tuple", "values"]
_LATE_FIRST_S = 2.0  # opencode: how long the event of the first token may trail the message's answer


class PeerTarget(Target, Protocol):
    """A `Target` with a life around the points: opencode's event stream is opened once."""

    async def start(self, http: aiohttp.ClientSession) -> None: ...

    async def stop(self) -> None: ...


async def created_id(http: aiohttp.ClientSession, url: str, key: str, refused: str) -> str:
    """POST `{}` to `url` (a peer creating a session or thread) and return the answer's `key`.

    Raises:
        RuntimeError: `refused`, with the status, on any answer but 200."""
    async with http.post(url, json={}) as response:
        if response.status != 200:
            raise RuntimeError(f"{refused}: {response.status}")
        return str((await response.json())[key])


def agno_verdict(event: SSEEvent, seen_first: bool = False) -> EventVerdict:
    if event.event == "RunContent":
        return "first"
    return _AGNO_TERMINAL.get(event.event)


class AgnoTarget:
    """Agno AgentOS's agent runs endpoint, streamed."""

    name = "agno"

    def __init__(self, base_url: str, turn_input: str = "hello", agent_id: str = "bench") -> None:
        self.base_url = base_url.rstrip("/")
        self._url = f"{self.base_url}/agents/{agent_id}/runs"
        self._input = turn_input

    async def start(self, http: aiohttp.ClientSession) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def open_worker(self, http: aiohttp.ClientSession) -> str | None:
        return f"bench-{uuid.uuid4().hex}"

    async def turn(self, http: aiohttp.ClientSession, worker: str | None, timeout_s: float) -> TurnSample:
        body = urlencode({"message": self._input, "stream": "true", "session_id": str(worker)}).encode()
        return await timed_stream(http, self._url, body, timeout_s, agno_verdict, _FORM)

    async def close_worker(self, http: aiohttp.ClientSession, worker: str | None) -> None:
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            async with http.delete(f"{self.base_url}/sessions/{worker}") as response:
                await response.read()


class _Delta(msgspec.Struct):
    messageID: str | None = None  # opencode's field name


class _Event(msgspec.Struct):
    type: str
    properties: _Delta


class OpencodeTarget:
    """opencode's server: a message per turn, its first token from the shared event stream.

    A delta is matched to its turn by the assistant message's id, which the turn's answer names:
    the event stream may trail the answers, so "the session's next delta" could be the previous
    turn's. `start()` opens the event stream before the first turn; `stop()` closes it."""

    name = "opencode"

    def __init__(self, base_url: str, turn_input: str = "hello") -> None:
        self.base_url = base_url.rstrip("/")
        self._body = msgspec.json.encode({"parts": [{"type": "text", "text": turn_input}]})
        self._first_seen: dict[str, float] = {}  # assistant message id -> its first delta's arrival
        self._waiting: dict[str, asyncio.Future[float]] = {}
        self._reader: asyncio.Task[None] | None = None
        self._decoder = msgspec.json.Decoder(_Event)

    async def start(self, http: aiohttp.ClientSession) -> None:
        connected = asyncio.get_running_loop().create_future()
        self._reader = asyncio.create_task(self._read_events(http, connected))
        await asyncio.wait_for(connected, 10.0)

    async def stop(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        self._first_seen.clear()

    async def open_worker(self, http: aiohttp.ClientSession) -> str | None:
        return await created_id(http, f"{self.base_url}/session", "id", "opencode refused a session")

    async def turn(self, http: aiohttp.ClientSession, worker: str | None, timeout_s: float) -> TurnSample:
        loop = asyncio.get_running_loop()
        started = loop.time()
        failure: FailureKind | None = None
        message: str | None = None
        try:
            async with asyncio.timeout(timeout_s):
                failure, message = await self._post(http, str(worker))
        except TimeoutError:
            failure = "timeout"
        except (aiohttp.ClientError, ConnectionError, msgspec.DecodeError, KeyError, TypeError):
            failure = "stream_break"
        ended = loop.time()
        first = await self._first_delta(message) if failure is None and message else None
        return TurnSample(started, ended, None if first is None else first - started, failure)

    async def close_worker(self, http: aiohttp.ClientSession, worker: str | None) -> None:
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            async with http.delete(f"{self.base_url}/session/{worker}") as response:
                await response.read()

    async def _post(self, http: aiohttp.ClientSession, session: str) -> tuple[FailureKind | None, str | None]:
        """The turn's outcome and its assistant message's id."""
        url = f"{self.base_url}/session/{session}/message"
        async with http.post(url, data=self._body, headers={"Content-Type": "application/json"}) as response:
            payload = await response.read()
            if response.status != 200:
                return status_failure(response.status), None
        info = msgspec.json.decode(payload)["info"]
        failed = info.get("error") or not info.get("time", {}).get("completed")
        return ("turn_failed" if failed else None), str(info["id"])

    async def _first_delta(self, message: str) -> float | None:
        """When the message's first delta arrived; waits a little for an event stream that trails."""
        if (seen := self._first_seen.pop(message, None)) is not None:
            return seen
        waiter: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self._waiting[message] = waiter
        try:
            return await asyncio.wait_for(waiter, _LATE_FIRST_S)
        except TimeoutError:
            return None
        finally:
            self._waiting.pop(message, None)
            self._first_seen.pop(message, None)

    async def _read_events(self, http: aiohttp.ClientSession, connected: asyncio.Future[None]) -> None:
        async with http.get(f"{self.base_url}/event", headers={"Accept": "text/event-stream"}) as response:
            connected.set_result(None)
            parser = SSEParser()
            loop = asyncio.get_running_loop()
            async for chunk in response.content.iter_any():
                for event in parser.feed(chunk):
                    self._note(event, loop.time())

    def _note(self, event: SSEEvent, now: float) -> None:
        if '"message.part.delta"' not in event.data:  # most events are not content: skip decoding them
            return
        decoded = self._decoder.decode(event.data)
        message = decoded.properties.messageID
        if decoded.type != "message.part.delta" or message is None:
            return
        if (waiter := self._waiting.get(message)) is not None:
            if not waiter.done():
                waiter.set_result(now)
        else:
            self._first_seen.setdefault(message, now)


class _LangGraphChunk(msgspec.Struct):
    content: str | list[Any] = ""  # a string, or content blocks
    tool_call_chunks: list[Any] = []


_LANGGRAPH_MESSAGE = msgspec.json.Decoder(tuple[_LangGraphChunk, msgspec.Raw])  # [chunk, metadata]


def langgraph_verdict(event: SSEEvent, seen_first: bool = False) -> EventVerdict:
    """LangGraph's run stream has no end event: with `values` asked for, the thread's state comes
    once before the model's tokens (the input) and once after them (the run done). A run whose
    model sends no content never reaches "first", so its stream ends as a `stream_break`."""
    if event.event == "error":
        return "turn_failed"
    if event.event == "values":
        return "ok" if seen_first else None
    if event.event != "messages" or seen_first:
        return None  # metadata, or a token after the first: nothing to decode
    chunk, _ = _LANGGRAPH_MESSAGE.decode(event.data)
    return "first" if chunk.content or chunk.tool_call_chunks else None


def langgraph_run_body(turn_input: str, assistant_id: str) -> bytes:
    """A run of the graph `assistant_id` on the thread with one user message, streamed per token."""
    message = {"role": "user", "content": turn_input}
    return msgspec.json.encode(
        {"assistant_id": assistant_id, "input": {"messages": [message]}, "stream_mode": _LANGGRAPH_STREAM_MODES}
    )


class LangGraphTarget:
    """LangGraph Server's threads and streamed runs: a thread per worker, a run per turn."""

    name = "langgraph"

    def __init__(self, base_url: str, turn_input: str = "hello", assistant_id: str = "bench") -> None:
        self.base_url = base_url.rstrip("/")
        self._body = langgraph_run_body(turn_input, assistant_id)

    async def start(self, http: aiohttp.ClientSession) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def open_worker(self, http: aiohttp.ClientSession) -> str | None:
        return await created_id(http, f"{self.base_url}/threads", "thread_id", "LangGraph refused a thread")

    async def turn(self, http: aiohttp.ClientSession, worker: str | None, timeout_s: float) -> TurnSample:
        url = f"{self.base_url}/threads/{worker}/runs/stream"
        return await timed_stream(http, url, self._body, timeout_s, langgraph_verdict)

    async def close_worker(self, http: aiohttp.ClientSession, worker: str | None) -> None:
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            async with http.delete(f"{self.base_url}/threads/{worker}") as response:
                await response.read()
