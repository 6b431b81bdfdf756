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
import functools
import threading
from collections.abc import AsyncGenerator, Callable, Coroutine, Generator
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar, Unpack

from agentos.client._async import AsyncClient, ClientOptions
from agentos.client._errors import ClientError
from agentos.client._runs import RunEvent
from agentos.client._types import TurnEvent
from agentos.kernel import OnBusy

T = TypeVar("T")
P = ParamSpec("P")


def _blocking(
    method: Callable[Concatenate[AsyncClient, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[Client, P], T]:
    """The blocking twin of an `AsyncClient` method: the same parameters (typed from the method,
    so the two cannot drift), its result waited for on the client's loop."""

    @functools.wraps(method)
    def call(self: Client, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._run(method(self._async, *args, **kwargs))

    return call


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

    create_session = _blocking(AsyncClient.create_session)
    get_session = _blocking(AsyncClient.get_session)
    list_sessions = _blocking(AsyncClient.list_sessions)
    delete_session = _blocking(AsyncClient.delete_session)
    messages = _blocking(AsyncClient.messages)
    events = _blocking(AsyncClient.events)

    # --- turns ---

    send_turn = _blocking(AsyncClient.send_turn)
    cancel_turn = _blocking(AsyncClient.cancel_turn)
    cancel_turn_by_id = _blocking(AsyncClient.cancel_turn_by_id)

    # --- agents ---

    create_agent = _blocking(AsyncClient.create_agent)
    list_agents = _blocking(AsyncClient.list_agents)
    get_agent = _blocking(AsyncClient.get_agent)

    # --- runs ---

    start_run = _blocking(AsyncClient.start_run)
    get_run = _blocking(AsyncClient.get_run)
    list_runs = _blocking(AsyncClient.list_runs)
    cancel_run = _blocking(AsyncClient.cancel_run)
    terminate_run = _blocking(AsyncClient.terminate_run)
    answer = _blocking(AsyncClient.answer)
    fork_run = _blocking(AsyncClient.fork_run)
    steer_run = _blocking(AsyncClient.steer_run)

    # --- browser tokens ---

    create_browser_token = _blocking(AsyncClient.create_browser_token)

    # --- knowledge ---

    create_collection = _blocking(AsyncClient.create_collection)
    list_collections = _blocking(AsyncClient.list_collections)
    get_collection = _blocking(AsyncClient.get_collection)
    delete_collection = _blocking(AsyncClient.delete_collection)
    add_document = _blocking(AsyncClient.add_document)
    list_documents = _blocking(AsyncClient.list_documents)
    get_document = _blocking(AsyncClient.get_document)
    delete_document = _blocking(AsyncClient.delete_document)
    query = _blocking(AsyncClient.query)

    # --- triggers ---

    create_trigger = _blocking(AsyncClient.create_trigger)
    list_triggers = _blocking(AsyncClient.list_triggers)
    get_trigger = _blocking(AsyncClient.get_trigger)
    delete_trigger = _blocking(AsyncClient.delete_trigger)
    rotate_trigger_secret = _blocking(AsyncClient.rotate_trigger_secret)
    list_deliveries = _blocking(AsyncClient.list_deliveries)
    get_delivery = _blocking(AsyncClient.get_delivery)
    retry_delivery = _blocking(AsyncClient.retry_delivery)

    # --- schedules ---

    create_schedule = _blocking(AsyncClient.create_schedule)
    list_schedules = _blocking(AsyncClient.list_schedules)
    get_schedule = _blocking(AsyncClient.get_schedule)
    pause_schedule = _blocking(AsyncClient.pause_schedule)
    resume_schedule = _blocking(AsyncClient.resume_schedule)
    delete_schedule = _blocking(AsyncClient.delete_schedule)

    # --- streams: plain iterators ---

    def stream_turn(
        self, session_id: str, text: str, *, on_busy: OnBusy | None = None
    ) -> Generator[TurnEvent, None, None]:
        return self._iterate(self._async.stream_turn(session_id, text, on_busy=on_busy))

    def follow_turn(self, session_id: str, turn_id: str, after: int | None = None) -> Generator[TurnEvent, None, None]:
        return self._iterate(self._async.follow_turn(session_id, turn_id, after))

    def run_events(self, run_id: str, after: int | None = None) -> Generator[RunEvent, None, None]:
        return self._iterate(self._async.run_events(run_id, after))


async def _next(stream: AsyncGenerator[T, None]) -> list[T]:
    """The next item as `[item]`; `[]` at the end (an exception cannot cross the loop cleanly
    as StopAsyncIteration, which a coroutine may not raise)."""
    try:
        return [await anext(stream)]
    except StopAsyncIteration:
        return []
