"""A turn in the runtime: its identity, where its events go, and its bookkeeping.

A turn runs in the task of whoever calls `Runtime.run_turn` (for SSE and JSON, the request's
own handler task: no extra task and no queue hop per token) and sends its events to a
`TurnSink`. The WebSocket runs each turn in a task of its own, so it can keep reading frames.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from agentos.errors import InvalidInput
from agentos.providers.base import Message
from agentos.store.records import MessageRecord
from agentos.telemetry import NULL_SPAN, Span

EventName = Literal[
    "turn.queued", "turn.started", "token", "turn.steered", "turn.completed", "turn.cancelled", "turn.failed"
]
TERMINAL_EVENTS: frozenset[str] = frozenset({"turn.completed", "turn.cancelled", "turn.failed"})


def check_input(text: object, max_chars: int) -> None:
    """The one check of a turn's or a run's input, wherever it comes from (a turn, a WebSocket
    frame, the OpenAI door, a run, a trigger's delivery).

    Raises: InvalidInput (422 `invalid_input`): not a string, blank, or over `max_chars`
        (`kernel.max_input_chars`)."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput("input must be a non-empty string")
    if len(text) > max_chars:
        raise InvalidInput(f"input is {len(text)} characters; the limit is {max_chars}")


class TurnSink(Protocol):
    async def send(self, event_id: str, name: str, data: dict[str, Any]) -> None:
        """Deliver one event. Raises ConnectionError when the client has gone away."""
        ...


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a turn ended normally: its terminal event, and `answer` when it completed (stored
    with that event, before the client hears of it); failed and cancelled ones stored theirs."""

    name: str
    data: dict[str, Any]
    answer: MessageRecord | None = None


class CollectingSink:
    """Keeps the events: the JSON answer, and tests."""

    __slots__ = ("events",)

    def __init__(self) -> None:
        self.events: list[tuple[str, str, dict[str, Any]]] = []

    async def send(self, event_id: str, name: str, data: dict[str, Any]) -> None:
        self.events.append((event_id, name, data))


class Turn:
    __slots__ = (
        "turn_id",
        "tenant_id",
        "session_id",
        "input",
        "task",
        "permit",
        "cancel_reason",
        "finishing",
        "run_id",
        "agent",
        "key_id",
        "owner",
        "span",
        "superseded_by",
        "submitted_s",
        "epoch",
        "fenced_out",
        "answered",
        "asked",
        "prompt",
        "tools",
        "queued",
        "rollback",
        "rolls_back",
        "rollback_elsewhere",
        "steered_into",
        "steers",
        "_seq",
    )

    def __init__(
        self, turn_id: str, tenant_id: str, session_id: str, text: str, submitted_s: float, agent: str | None = None
    ) -> None:
        self.turn_id = turn_id
        self.tenant_id = tenant_id  # of its session: every message and event it writes carries it
        self.session_id = session_id
        self.input = text
        self.task: asyncio.Task[Any] | None = None  # the task running it, once it runs
        # None once the kernel granted a permit; a future while the turn waits for one.
        self.permit: asyncio.Future[None] | None = None
        self.cancel_reason: str | None = None
        self.finishing = False  # the answer is complete: a cancel no longer applies
        self.agent = agent  # the agent that runs the turn; None: a plain chat turn
        self.key_id = ""  # the key that asked for it ("": none, or not known)
        self.owner: str | None = None  # its session's end user: the owner of the run an agent turn starts
        self.span: Span = NULL_SPAN  # its trace span while it runs (agentos.telemetry)
        self.superseded_by = ""  # the traceparent of the request whose turn cancelled it (last-wins)
        self.run_id: str | None = None  # set when the session's agent runs the turn
        self.submitted_s = submitted_s
        # The session's turn epoch this turn holds (PostgreSQL; None on the one-node stores).
        self.epoch: int | None = None
        self.fenced_out = False  # a newer epoch exists: the store refuses this turn's writes
        self.answered = False  # its answer and turn.completed are committing or committed: it completed
        self.asked = False  # its question is stored (or queued): only then may an answer, whole or partial, follow
        # The model's whole conversation as a client sent it (the OpenAI front door's stateless
        # mode), ending with `input`; None: the session's transcript, then `input`.
        self.prompt: list[Message] | None = None
        self.tools: list[dict[str, Any]] | None = None  # a client's own tools (plain chat turns only)
        # While it waits in its session's queue (`on_busy` enqueue or steer): `(ahead, accepted)`,
        # the turns ahead of it when it joined and the future its promotion resolves.
        self.queued: tuple[int, asyncio.Future[None]] | None = None
        self.rollback = False  # replaced by a turn with `on_busy` "rollback": its messages go
        self.rolls_back: list[str] = []  # the turns this one replaced with "rollback"
        self.rollback_elsewhere = False  # "rollback" in a session idle here: perhaps busy on another node
        self.steered_into: str | None = None  # its message was delivered into this agent turn
        # Messages steered into this agent turn before its run existed: offered once it does.
        self.steers: list[tuple[str, Callable[[], bool]]] = []
        self._seq = 0

    @property
    def seq(self) -> int:
        """The seq of the latest event id made (0 before the first)."""
        return self._seq

    def next_event_id(self) -> str:
        """`<turn_id>:<seq>`: a later resume can name its place in the stream."""
        self._seq += 1
        return f"{self.turn_id}:{self._seq}"
