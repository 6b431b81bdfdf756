"""A run's events as one stream, resumed across broken connections (`AsyncClient.run_events`).

Each connection asks for the events after the last seq received (`Last-Event-ID`), so no
journaled event is lost or repeated. A connection that breaks, falls silent for the idle
timeout, or carries the server's `error` event is opened again after a pause that starts at
`reconnect_delay_s` and doubles with each failure in a row (at most `MAX_RECONNECT_DELAY_S`); a
connection that brought a new event resets the count. Live `token` events have no seq and are
not replayed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from dataclasses import dataclass

from agentos.client._errors import ProtocolError, StreamError, TransportError
from agentos.client._http import Transport, event_data, url_path
from agentos.client._types import RunEvent
from agentos.providers.sse_parser import SSEEvent

MAX_RECONNECT_DELAY_S = 8.0


@dataclass(frozen=True)
class Reconnects:
    """How a run's event stream reconnects (`AsyncClient`'s arguments of the same names)."""

    stream_idle_timeout_s: float
    max_reconnects: int
    reconnect_delay_s: float


async def resumed_run_events(
    http: Transport, run_id: str, after: int | None, reconnects: Reconnects
) -> AsyncGenerator[RunEvent, None]:
    """The run's events after seq `after` (None: from its start) until the terminal one.

    Raises:
        APIError: 404 `run_not_found` (or any refusal of a reconnect).
        StreamError: the stream kept failing (`stream_broken`, or the server's own code).
    """
    last = after
    failures = 0
    while True:
        received = False
        try:
            async for event in _one_connection(http, run_id, last, reconnects.stream_idle_timeout_s):
                received = True
                last = event.seq if event.seq is not None else last
                yield event
                if event.terminal:
                    return
            error = StreamError("stream_broken", f"the events of run {run_id!r} ended before the run did")
        except TransportError as exc:
            error = StreamError("stream_broken", str(exc))
            error.__cause__ = exc
        except StreamError as exc:
            error = exc
        failures = 0 if received else failures + 1
        if failures > reconnects.max_reconnects:
            raise error
        await asyncio.sleep(min(reconnects.reconnect_delay_s * 2**failures, MAX_RECONNECT_DELAY_S))


async def _one_connection(
    http: Transport, run_id: str, after: int | None, idle_timeout_s: float
) -> AsyncGenerator[RunEvent, None]:
    """One connection's events. Raises: StreamError: the server sent its `error` event."""
    headers = {} if after is None else {"Last-Event-ID": str(after)}
    path = url_path("/v1/runs/{}/events", run_id)
    async with http.stream("GET", path, headers=headers, idle_timeout_s=idle_timeout_s) as events:
        async for sse in events:
            data = event_data(sse)
            if sse.event == "error":  # the stream failed, not the run: no id, resume after the last one
                raise StreamError(
                    str(data.get("code", "error")), str(data.get("message", "")), error_id=data.get("error_id")
                )
            yield RunEvent(sse.event, _seq(sse), data)


def _seq(sse: SSEEvent) -> int | None:
    """Raises: ProtocolError: an `id:` that is not a seq."""
    # The parser keeps the last id for an event sent without one (a live token): not its seq.
    if sse.event == "token" or sse.id is None:
        return None
    try:
        return int(sse.id)
    except ValueError:
        raise ProtocolError(f"a run event's id must be its seq, got {sse.id!r}") from None
