"""The store used when `store.enabled = false`: nothing persists, nothing outlives memory.

It keeps sessions and their transcripts in dicts while they are in memory; a session evicted
by the TTL is forgotten with its history (there is nowhere else to keep it). Events and the
access log are not kept at all; the usage ledger keeps its newest `LEDGER_MAX_ROWS` rows. It
is the kernel's ceiling in the bench, and a verified fake of `SQLiteStore` in tests: every
read takes the caller's tenant and sees only that tenant's rows, exactly like the SQLite store's queries.
"""

from __future__ import annotations

import itertools
from collections import Counter, deque

from agentos.store import ledger
from agentos.store.base import OneNodeTurns, StoreStatistics
from agentos.store.ledger import UsageQuery, UsageRow, UsageTotal
from agentos.store.records import AccessRecord, EventRecord, MessageRecord, SessionRecord

LEDGER_MAX_ROWS = 100_000  # nothing outlives memory: a bound, not a ledger to bill from


class MemoryStore(OneNodeTurns):
    def __init__(self, *, keep_events: bool = False) -> None:
        self._sessions: dict[str, SessionRecord] = {}
        self._messages: dict[str, list[MessageRecord]] = {}
        self._events: dict[str, list[EventRecord]] = {}
        self._keep_events = keep_events
        self._ids = itertools.count(1)
        self._ledger: deque[UsageRow] = deque(maxlen=LEDGER_MAX_ROWS)

    async def start(self) -> None:
        return None

    async def check(self) -> None:
        return None  # memory is always there

    async def close(self) -> None:
        return None

    async def create_session(self, record: SessionRecord) -> None:
        if record.session_id in self._sessions:  # as SQLite's ON CONFLICT DO NOTHING
            return
        self._sessions[record.session_id] = record
        self._messages[record.session_id] = []

    def _owned(self, tenant_id: str, session_id: str) -> SessionRecord | None:
        record = self._sessions.get(session_id)
        return record if record is not None and record.tenant_id == tenant_id else None

    async def get_session(self, tenant_id: str, session_id: str) -> SessionRecord | None:
        return self._owned(tenant_id, session_id)

    async def list_sessions(
        self, tenant_id: str, *, limit: int, after: str | None, agent: str | None = None, owner: str | None = None
    ) -> list[SessionRecord]:
        ids = sorted(
            s
            for s, r in self._sessions.items()
            if r.tenant_id == tenant_id and s > (after or "") and agent in (None, r.agent) and owner in (None, r.owner)
        )
        return [self._sessions[s] for s in ids[:limit]]

    async def delete_session(self, tenant_id: str, session_id: str) -> bool:
        if self._owned(tenant_id, session_id) is None:
            return False
        self.forget_session(session_id)
        return True

    async def session_counts(self) -> dict[str, int]:
        return dict(Counter(r.tenant_id for r in self._sessions.values()))

    async def token_usage_since(self, since_ms: int) -> dict[str, int]:
        used: Counter[str] = Counter()
        for transcript in self._messages.values():
            for m in transcript:
                if m.usage and m.created_at_ms >= since_ms:
                    used[m.tenant_id] += m.usage.get("prompt_tokens", 0) + m.usage.get("completion_tokens", 0)
        return dict(used)

    def forget_session(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)
        self._messages.pop(session_id, None)
        self._events.pop(session_id, None)

    async def idle_sessions(
        self, tenant_id: str, before_ms: int, *, after: str, limit: int
    ) -> tuple[list[str], str | None]:
        ids = sorted(s for s, r in self._sessions.items() if r.tenant_id == tenant_id and s > after)[:limit]
        return [s for s in ids if self._idle(s, before_ms)], (ids[-1] if len(ids) == limit else None)

    def _idle(self, session_id: str, before_ms: int) -> bool:
        latest = max((m.created_at_ms for m in self._messages.get(session_id, [])), default=0)
        return max(self._sessions[session_id].created_at_ms, latest) < before_ms

    async def expire_access(self, tenant_id: str, before_ms: int, *, limit: int) -> int:
        return 0  # access rows are not kept in memory

    async def expire_usage(self, tenant_id: str, before_ms: int, *, limit: int) -> int:
        doomed = [row for row in self._ledger if row.tenant_id == tenant_id and row.at_ms < before_ms]
        doomed = sorted(doomed, key=lambda row: row.at_ms)[:limit]
        gone = set(map(id, doomed))
        kept = [row for row in self._ledger if id(row) not in gone]
        self._ledger.clear()
        self._ledger.extend(kept)
        return len(doomed)

    async def wait_space(self) -> None:
        return None

    def add_message(self, record: MessageRecord) -> None:
        transcript = self._messages.get(record.session_id)
        if transcript is None:
            return
        for i, old in enumerate(transcript):
            if old.turn_id == record.turn_id and old.role == record.role:
                record.message_id = old.message_id
                transcript[i] = record
                return
        record.message_id = next(self._ids)
        transcript.append(record)

    async def commit_message(self, record: MessageRecord) -> None:
        self.add_message(record)

    def _transcript(self, tenant_id: str, session_id: str) -> list[MessageRecord]:
        return [m for m in self._messages.get(session_id, []) if m.tenant_id == tenant_id]

    async def delete_turn_messages(self, tenant_id: str, session_id: str, turn_id: str) -> None:
        transcript = self._messages.get(session_id)
        if transcript is None or self._owned(tenant_id, session_id) is None:
            return
        if not any(m.turn_id == turn_id and m.role == "assistant" and m.status == "completed" for m in transcript):
            transcript[:] = [m for m in transcript if m.turn_id != turn_id]

    async def history(self, tenant_id: str, session_id: str, *, limit: int) -> list[MessageRecord]:
        return self._transcript(tenant_id, session_id)[-limit:]

    async def list_messages(self, tenant_id: str, session_id: str, *, after: int, limit: int) -> list[MessageRecord]:
        return [m for m in self._transcript(tenant_id, session_id) if m.message_id > after][:limit]

    async def commit_answer(self, answer: MessageRecord, event: EventRecord) -> None:
        self.add_message(answer)
        self.add_event(event, durable=True)

    def add_event(self, record: EventRecord, *, durable: bool = False) -> None:
        if self._keep_events and record.session_id in self._sessions:
            record.event_id = next(self._ids)
            self._events.setdefault(record.session_id, []).append(record)

    async def list_events(self, tenant_id: str, session_id: str, *, after: int, limit: int) -> list[EventRecord]:
        events = self._events.get(session_id, [])
        return [e for e in events if e.tenant_id == tenant_id and e.event_id > after][:limit]

    async def list_turn_events(
        self, tenant_id: str, session_id: str, turn_id: str, *, after_seq: int, limit: int
    ) -> list[EventRecord]:
        events = self._events.get(session_id, [])
        mine = [e for e in events if e.tenant_id == tenant_id and e.turn_id == turn_id and e.seq > after_seq]
        return sorted(mine, key=lambda e: e.seq)[:limit]

    def log_access(self, record: AccessRecord) -> None:
        return None

    def record_usage(self, row: UsageRow) -> None:
        self._ledger.append(row)

    async def usage_totals(self, query: UsageQuery) -> list[UsageTotal]:
        return ledger.totals(query, self._ledger)

    def statistics(self) -> StoreStatistics:
        return StoreStatistics(0, 0, 0, 0, 0)
