"""What the client returns of sessions and turns (runs': `_runs`; knowledge's, triggers' and
schedules': their modules): frozen msgspec Structs decoded straight from the server's JSON.

Unknown fields are ignored, so a newer server that adds a field does not break an older client.
Field names follow the server's, except that a bare `id` becomes `session_id`, `message_id`
or `event_id` (the wire name is kept through `msgspec.field(name=...)`).
"""

from __future__ import annotations

from typing import Any, Generic, Literal, TypeVar

import msgspec

from agentos.client._runs import HumanRequest, human_request
from agentos.kernel import OnBusy

T = TypeVar("T")

TURN_TERMINAL = frozenset({"turn.completed", "turn.cancelled", "turn.failed"})


class Session(msgspec.Struct, frozen=True, kw_only=True):
    session_id: str = msgspec.field(name="id")
    agent: str | None = None
    metadata: dict[str, Any] = {}
    tenant_id: str | None = None
    created_at_ms: int = 0
    active_turn: str | None = None  # only `get_session` reports it
    owner: str | None = None  # the end user who opened it (their token's `sub`); None: a tenant key
    on_busy: OnBusy | None = None  # its turns' default (docs/conversations.md); None: its agent's, else replace


class Page(msgspec.Struct, Generic[T], frozen=True, kw_only=True):
    """One page of a list; pass `next_cursor` as `after` for the next one (None: the last page)."""

    data: list[T]
    next_cursor: str | int | None = None


class Message(msgspec.Struct, frozen=True, kw_only=True):
    message_id: int = msgspec.field(name="id")
    turn_id: str
    role: str
    content: str
    status: str
    usage: dict[str, int] | None = None
    created_at_ms: int = 0


class SessionEvent(msgspec.Struct, frozen=True, kw_only=True):
    """A stored turn event of a session (`turn.started`, `turn.completed`, ...); tokens are not stored."""

    event_id: int = msgspec.field(name="id")
    turn_id: str
    type: str
    data: dict[str, Any] = {}
    created_at_ms: int = 0


class TurnResult(msgspec.Struct, frozen=True, kw_only=True):
    """A whole turn, answered as JSON (`send_turn`)."""

    turn_id: str
    session_id: str
    status: Literal["completed", "cancelled", "failed"]
    output: str
    usage: dict[str, int] | None = None
    reason: str | None = None
    message: str | None = None
    finish_reason: str | None = None
    steered_into: str | None = None  # `on_busy="steer"`: the running agent turn that took the message


class TurnEvent(msgspec.Struct, frozen=True):
    """One event of a streamed turn: `turn.started`, `token` (`data["delta"]`), the terminal
    `turn.completed` / `turn.cancelled` / `turn.failed`; an agent session's turn also carries
    its run's events (`tool.call`, `human.requested`, ... with `data["run_id"]`)."""

    name: str
    event_id: str | None
    data: dict[str, Any]

    @property
    def terminal(self) -> bool:
        return self.name in TURN_TERMINAL

    def human_request(self) -> HumanRequest:
        """The request of a `human.requested` event (answer it at `data["run_id"]`).

        Raises:
            ValueError: this is another kind of event.
        """
        return human_request(self.name, self.data)


class BrowserToken(msgspec.Struct, frozen=True, kw_only=True):
    """A short-lived token for one end user's page (`create_browser_token`), narrowed to
    `session_ids` and `run_ids`; `token` is shown this once (docs/security.md, "Browser tokens")."""

    token: str
    expires_at_ms: int
    scopes: list[str]
    session_ids: list[str] = []
    run_ids: list[str] = []
    subject: str | None = None
    key_id: str | None = None  # the parent key: revoking it refuses this token at once
    token_type: str = "Bearer"

    def __repr__(self) -> str:  # the token stays out of logs and tracebacks
        return f"BrowserToken(scopes={self.scopes!r}, expires_at_ms={self.expires_at_ms!r})"
