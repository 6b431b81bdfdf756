"""Runs: what the client returns of them (`Run`, `RunRef`, `RunEvent`, `HumanRequest`, ...), and
their events as one stream, resumed across broken connections (`AsyncClient.run_events`).

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
from typing import Any, Literal

import msgspec

from agentos.client._errors import ProtocolError, StreamError, TransportError
from agentos.client._http import Transport, event_data, url_path
from agentos.kernel import RUN_TERMINAL_EVENTS
from agentos.providers.sse_parser import SSEEvent

MAX_RECONNECT_DELAY_S = 8.0
RUN_TERMINAL = RUN_TERMINAL_EVENTS
RunStatus = Literal["queued", "running", "waiting_human", "completed", "failed", "cancelled"]


class ForkOrigin(msgspec.Struct, frozen=True, kw_only=True):
    """The run a fork was forked from, and the last step of its journal the fork copied."""

    run_id: str
    at_seq: int


class RunRef(msgspec.Struct, frozen=True, kw_only=True):
    """A run just started (`start_run`, `fork_run`): it is queued; follow it with `run_events(run_id)`."""

    run_id: str
    status: str
    run_url: str = ""
    events_url: str = ""
    forked_from: ForkOrigin | None = None  # `fork_run`: the run and step it was forked from


class RunSteered(msgspec.Struct, frozen=True, kw_only=True):
    """A message steered into a working run (`steer_run`): `seq` is the journal step that holds
    it; None when the run works on another node that has not taken it in yet (it stays queued
    for the run's next step)."""

    run_id: str
    seq: int | None = None


class HumanRequest(msgspec.Struct, frozen=True, kw_only=True):
    """What a run waits for: a `question` to answer, or an `approval` of `tool` with `arguments`,
    which must quote `args_hash`; `uncertain`: answer "retry" or "skip"."""

    operation_id: str
    kind: Literal["question", "approval", "uncertain"]
    args_hash: str | None = None
    question: str | None = None
    tool: str | None = None
    arguments: Any = None
    deadline_ms: int | None = None
    call_id: str | None = None


class Run(msgspec.Struct, frozen=True, kw_only=True):
    run_id: str
    agent: str
    status: RunStatus
    session_id: str | None = None
    parent_run_id: str | None = None
    input: str = ""  # in `list_runs`, cut at 500 characters when `input_truncated`
    input_truncated: bool = False
    result: str | None = None
    reason: str | None = None
    created_ms: int = 0
    updated_ms: int = 0
    pending: HumanRequest | None = None  # only while `status` is "waiting_human"
    trace_id: str | None = None  # `get_run` with tracing on: the run's own trace
    trace_url: str | None = None  # and its page in the operator's backend (`trace_url_template`)
    forked_from: ForkOrigin | None = None  # a fork: the run and step it was forked from
    owner: str | None = None  # the end user who started it (their token's `sub`); None: a tenant key


class RunEvent(msgspec.Struct, frozen=True):
    """One event of a run. `seq` is its place in the run's journal; live `token` events have none."""

    name: str
    seq: int | None
    data: dict[str, Any]

    @property
    def terminal(self) -> bool:
        return self.name in RUN_TERMINAL

    @property
    def at_ms(self) -> int | None:
        """When the event was journaled (ms since the epoch); None for a live `token`."""
        at_ms = self.data.get("at_ms")
        return at_ms if isinstance(at_ms, int) else None

    def human_request(self) -> HumanRequest:
        """The request of a `human.requested` event.

        Raises:
            ValueError: this is another kind of event.
        """
        return human_request(self.name, self.data)


def human_request(name: str, data: dict[str, Any]) -> HumanRequest:
    if name != "human.requested":
        raise ValueError(f"{name!r} is not a human.requested event")
    return msgspec.convert(data, HumanRequest)


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
