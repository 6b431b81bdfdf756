"""`Client`: the blocking twin of `AsyncClient`, for scripts, notebooks and tests without a loop.

How it blocks: each `Client` owns a private event loop running in a daemon thread. A call is
the same `AsyncClient` coroutine, handed to that loop (`run_coroutine_threadsafe`) and waited
for; a stream is a generator that fetches one event at a time from the async generator on that
loop. Not `asyncio.run` per call: aiohttp's session and its pooled connections belong to one
loop, and a stream spans many calls. The thread is stopped by `close()` (or leaving `with`).

Do not call a `Client` from a coroutine: it blocks the calling loop until the answer comes
(a deadlock if that loop is the server's). In async code use `AsyncClient`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator, Coroutine, Generator, Mapping
from types import TracebackType
from typing import Any, TypeVar, Unpack

from agentos.client._async import Approval, AsyncClient, ClientOptions, ForkEdit, RunFilter
from agentos.client._errors import ClientError
from agentos.client._types import Message, Page, Run, RunEvent, RunRef, Session, SessionEvent, TurnEvent, TurnResult

T = TypeVar("T")


class Client:
    """A blocking client of one Agent OS server: the methods of `AsyncClient`, same arguments,
    same results and errors; the streams (`stream_turn`, `run_events`) are plain iterators.

    Usage::

        with Client("http://127.0.0.1:8080") as client:
            session = client.create_session()
            for event in client.stream_turn(session.session_id, "hello"):
                ...
    """

    def __init__(self, base_url: str, **options: Unpack[ClientOptions]) -> None:
        """`base_url` and `options`: `AsyncClient`'s, with its defaults."""
        self._async = AsyncClient(base_url, **options)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="agentos-client", daemon=True)
        self._thread.start()
        self._closed = False

    @property
    def base_url(self) -> str:
        return self._async.base_url

    def __enter__(self) -> Client:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections (and any stream left open) and stop the client's thread."""
        if self._closed:
            return
        try:
            self._run(self._loop.shutdown_asyncgens())  # streams left unfinished close their responses
            self._run(self._async.aclose())
        finally:
            self._closed = True
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the client's loop and wait for it.

        Raises:
            ClientError: the client is closed; and whatever `coro` raises.
        """
        if self._closed:
            coro.close()
            raise ClientError("the client is closed")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # a KeyboardInterrupt here must not leave the request running
            raise

    def _iterate(self, stream: AsyncGenerator[T, None]) -> Generator[T, None, None]:
        try:
            while items := self._run(_next(stream)):
                yield items[0]
        finally:
            if not self._closed:
                self._run(stream.aclose())

    # --- sessions ---

    def create_session(self, agent: str | None = None, metadata: Mapping[str, Any] | None = None) -> Session:
        return self._run(self._async.create_session(agent, metadata))

    def get_session(self, session_id: str) -> Session:
        return self._run(self._async.get_session(session_id))

    def list_sessions(self, limit: int | None = None, after: str | None = None) -> Page[Session]:
        return self._run(self._async.list_sessions(limit, after))

    def delete_session(self, session_id: str) -> None:
        self._run(self._async.delete_session(session_id))

    def messages(self, session_id: str, *, after: int | None = None, limit: int | None = None) -> Page[Message]:
        return self._run(self._async.messages(session_id, after=after, limit=limit))

    def events(self, session_id: str, *, after: int | None = None, limit: int | None = None) -> Page[SessionEvent]:
        return self._run(self._async.events(session_id, after=after, limit=limit))

    # --- turns ---

    def send_turn(self, session_id: str, text: str) -> TurnResult:
        return self._run(self._async.send_turn(session_id, text))

    def stream_turn(self, session_id: str, text: str) -> Generator[TurnEvent, None, None]:
        return self._iterate(self._async.stream_turn(session_id, text))

    def cancel_turn(self, session_id: str) -> str | None:
        return self._run(self._async.cancel_turn(session_id))

    # --- agents ---

    def create_agent(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        return self._run(self._async.create_agent(spec))

    def list_agents(self) -> list[dict[str, Any]]:
        return self._run(self._async.list_agents())

    def get_agent(self, name: str) -> dict[str, Any]:
        return self._run(self._async.get_agent(name))

    # --- runs ---

    def start_run(self, agent: str, text: str, session_id: str | None = None) -> RunRef:
        return self._run(self._async.start_run(agent, text, session_id))

    def get_run(self, run_id: str) -> Run:
        return self._run(self._async.get_run(run_id))

    def list_runs(self, **filters: Unpack[RunFilter]) -> Page[Run]:
        return self._run(self._async.list_runs(**filters))

    def cancel_run(self, run_id: str) -> Run:
        return self._run(self._async.cancel_run(run_id))

    def terminate_run(self, run_id: str) -> Run:
        return self._run(self._async.terminate_run(run_id))

    def answer(self, run_id: str, operation_id: str, answer: str = "", **approval: Unpack[Approval]) -> Run:
        return self._run(self._async.answer(run_id, operation_id, answer, **approval))

    def fork_run(self, run_id: str, at_seq: int, **edits: Unpack[ForkEdit]) -> RunRef:
        return self._run(self._async.fork_run(run_id, at_seq, **edits))

    def run_events(self, run_id: str, after: int | None = None) -> Generator[RunEvent, None, None]:
        return self._iterate(self._async.run_events(run_id, after))


async def _next(stream: AsyncGenerator[T, None]) -> list[T]:
    """The next item as `[item]`; `[]` at the end (an exception cannot cross the loop cleanly
    as StopAsyncIteration, which a coroutine may not raise)."""
    try:
        return [await anext(stream)]
    except StopAsyncIteration:
        return []
