"""The store contract shared by the SQLite store and the in-memory one.

Tenancy: every read and deletion a request can reach takes the caller's `tenant_id` first and
filters on it (in SQL for the SQLite store); another tenant's session answers exactly as a
missing one (None, False, []). There is no "every tenant" read. Writes stamp the tenant carried
by the record itself.

Writes that carry a promise (`create_session`, `commit_message`, `commit_answer`) are awaited
until their batch is committed; the others (`add_message`, `add_event`, `log_access`) return at
once. Events and access rows may be shed under overload (counted); messages never are:
`add_message` callers await `wait_space()` first, which is the backpressure. A turn's terminal
event is never shed: a completed turn's is committed with its answer (`commit_answer`), before
the client hears of it; a failed or cancelled turn's is added with `durable=True`.

A store that cannot be reached (a database away, a writer closed or dead) raises
`StoreUnavailable` (503 with Retry-After) from any call, within a bound; other failures raise
`StoreError` (500).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from agentos.store.ledger import UsageQuery, UsageRow, UsageTotal
from agentos.store.records import AccessRecord, EventRecord, MessageRecord, SessionRecord


@dataclass(frozen=True, slots=True)
class WriterStatistics:
    """One writer's counters (`agentos.store.writer.Writer.statistics`)."""

    name: str
    queued: int  # durable lane
    written_total: int
    dropped_total: int  # sheddable lane, over its bound
    batches_total: int
    shed_queued: int = 0  # sheddable lane
    failed_total: int = 0  # operations that failed (their futures got a StoreError)
    retried_total: int = 0  # batches applied again after a failed BEGIN or COMMIT


@dataclass(frozen=True, slots=True)
class StoreStatistics:
    message_queue: int
    event_queue: int
    access_queue: int
    events_dropped_total: int
    access_dropped_total: int
    stale_writes_total: int = 0  # refused by the turn fence (PostgreSQL: a superseded turn's writes)
    ledger_queue: int = 0  # usage ledger rows queued, not yet committed (never shed)


@dataclass(frozen=True, slots=True)
class EpochBump:
    """A session's turn epoch after a bump (`Store.begin_turn`, `Store.cancel_turn`), and the turn
    it fenced out: the one that held the epoch and was still running (None: none was)."""

    epoch: int
    previous_turn: str | None


class Store(Protocol):
    async def start(self) -> None: ...
    async def close(self) -> None: ...
    async def check(self) -> None:
        """For `/readyz`: return if the store can serve requests now.

        Raises:
            StoreUnavailable: it cannot (a database away, a writer closed or dead); cheap to call.
        """
        ...

    async def create_session(self, record: SessionRecord) -> None: ...
    async def get_session(self, tenant_id: str, session_id: str) -> SessionRecord | None: ...
    async def list_sessions(
        self, tenant_id: str, *, limit: int, after: str | None, agent: str | None = None, owner: str | None = None
    ) -> list[SessionRecord]:
        """The tenant's sessions after the id `after`, in id order; `agent`: only those opened
        with that agent (`"default"`: those opened without one); `owner`: only that user's."""
        ...

    async def delete_session(self, tenant_id: str, session_id: str) -> bool:
        """Delete the tenant's session with its transcript, its events, its access rows (every
        path at or below `/v1/sessions/{id}`) and its JSONL lines; False if unknown (or another
        tenant's). SQLite leaves no readable copy in its files (`secure_delete`, the WAL truncated).

        Each part is deleted after every write of the session queued before the call.
        """
        ...

    async def session_counts(self) -> dict[str, int]:
        """Sessions stored, per tenant (the sessions quota is seeded from it at start)."""
        ...

    async def token_usage_since(self, since_ms: int) -> dict[str, int]:
        """Provider tokens (prompt + completion) in the usage of messages written at or after
        `since_ms`, per tenant (the tokens-per-day quota is seeded from it at start)."""
        ...

    def forget_session(self, session_id: str) -> None:
        """The session left memory (TTL). Persistent stores keep it; the memory store drops it."""
        ...

    # Last-wins across nodes (PostgreSQL; `agentos.store.pg_fence`). The one-node stores answer
    # None and do nothing: there, the kernel's per-process last-wins is the whole story.
    async def begin_turn(self, tenant_id: str, session_id: str, turn_id: str) -> EpochBump | None:
        """Bump the session's turn epoch for `turn_id`; its writes from now on are fenced by it.
        The bump names the turn it fenced out, if one was still running (on any node).

        Raises: SessionNotFound (the session is gone), StoreUnavailable.
        """
        ...

    async def cancel_turn(self, tenant_id: str, session_id: str) -> EpochBump | None:
        """Fence out the session's running turn wherever it runs; None if none runs (or one node).

        Raises: StoreUnavailable.
        """
        ...

    def end_turn(self, turn_id: str, *, pending_writes: bool = True, answered: bool = True) -> None:
        """The turn has made its last fenced write: forget its epoch. `pending_writes=False`:
        none of its fenced writes can still be queued (its answer was committed).
        `answered=False`: it stored no answer, whole or partial (its client left before its
        question was stored, a rollback turn ended, an agent turn ended without one), which is
        what tells the other nodes a turn ended: the store records its end otherwise, after the
        writes queued so far (PostgreSQL: the session no longer names it as its running turn)."""
        ...

    async def running_turn(self, tenant_id: str, session_id: str) -> str | None:
        """The session's turn still running on any node (it holds the epoch and stored no answer
        yet), for `on_busy` reject across nodes; None if none (or one node).

        Raises: StoreUnavailable.
        """
        ...

    async def wait_space(self) -> None: ...
    def add_message(self, record: MessageRecord) -> None: ...
    async def commit_message(self, record: MessageRecord) -> None: ...
    async def delete_turn_messages(self, tenant_id: str, session_id: str, turn_id: str) -> None:
        """Remove a turn's messages from the transcript (a turn rolled back, `on_busy`
        "rollback"), after every write of them queued before the call; unless it completed after
        all (its answer committed before it could be stopped): then they stay."""
        ...

    async def history(self, tenant_id: str, session_id: str, *, limit: int) -> list[MessageRecord]: ...
    async def list_messages(
        self, tenant_id: str, session_id: str, *, after: int, limit: int
    ) -> list[MessageRecord]: ...

    async def commit_answer(self, answer: MessageRecord, event: EventRecord) -> None:
        """Commit a turn's answer and its terminal event (`turn.completed`), never shed: once this
        returns both are stored. Both are queued before its first await, so a caller cancelled
        while it waits still has them stored.

        Raises: StaleTurn (PostgreSQL: the turn was superseded, neither is stored), StoreUnavailable.
        """
        ...

    def add_event(self, record: EventRecord, *, durable: bool = False) -> None:
        """Queue an event; shed under overload unless `durable` (a turn's terminal event)."""
        ...

    async def list_events(self, tenant_id: str, session_id: str, *, after: int, limit: int) -> list[EventRecord]: ...
    async def list_turn_events(
        self, tenant_id: str, session_id: str, turn_id: str, *, after_seq: int, limit: int
    ) -> list[EventRecord]:
        """The turn's stored events with a seq above `after_seq`, in seq order (a resumed stream)."""
        ...

    def log_access(self, record: AccessRecord) -> None: ...

    # The usage ledger (`agentos.store.ledger`).
    def record_usage(self, row: UsageRow) -> None:
        """Queue one ledger row and return at once; never shed (its own durable lane).

        Raises: StoreError: the store is closed or its writer dead (nothing was queued).
        """
        ...

    async def usage_totals(self, query: UsageQuery) -> list[UsageTotal]:
        """The ledger's totals for `query`, after every row recorded before the call.

        Raises: StoreUnavailable, StoreError.
        """
        ...

    # Retention (`agentos.runtime.retention`): each call is one bounded transaction.
    async def idle_sessions(
        self, tenant_id: str, before_ms: int, *, after: str, limit: int
    ) -> tuple[list[str], str | None]:
        """Of the tenant's next `limit` sessions after the id `after`, in id order, those with no
        activity at or after `before_ms` (created before it, no message written since); and the
        id to continue after, None after the last page.

        Raises: StoreUnavailable, StoreError.
        """
        ...

    async def expire_access(self, tenant_id: str, before_ms: int, *, limit: int) -> int:
        """Delete up to `limit` of the tenant's oldest access rows logged before `before_ms`; how many.

        Raises: StoreUnavailable, StoreError.
        """
        ...

    async def expire_usage(self, tenant_id: str, before_ms: int, *, limit: int) -> int:
        """Delete up to `limit` of the tenant's oldest ledger rows recorded before `before_ms`; how many.

        Raises: StoreUnavailable, StoreError.
        """
        ...

    def statistics(self) -> StoreStatistics: ...


class OneNodeTurns:
    """The turn epochs of the one-node stores (SQLite, memory): none. In one process the
    kernel's last-wins is the whole story, and this costs a turn nothing."""

    async def begin_turn(self, tenant_id: str, session_id: str, turn_id: str) -> EpochBump | None:
        return None

    async def cancel_turn(self, tenant_id: str, session_id: str) -> EpochBump | None:
        return None

    def end_turn(self, turn_id: str, *, pending_writes: bool = True, answered: bool = True) -> None:
        return None

    async def running_turn(self, tenant_id: str, session_id: str) -> str | None:
        return None
