"""The store used when `store.enabled = false`: nothing persists, nothing outlives memory.

It keeps sessions and their transcripts in dicts while they are in memory; a session evicted
by the TTL is forgotten with its history (there is nowhere else to keep it). Events and the
access log are not kept at all. It is the kernel's ceiling in the bench, and a verified fake
of `SQLiteStore` in tests.
"""

from __future__ import annotations

import itertools
from collections import Counter

from agentos.store.base import StoreStatistics
from agentos.store.records import AccessRecord, EventRecord, MessageRecord, SessionRecord


class MemoryStore:
    def __init__(self, *, keep_events: bool = False) -> None:
        self._sessions: dict[str, SessionRecord] = {}
        self._messages: dict[str, list[MessageRecord]] = {}
        self._events: dict[str, list[EventRecord]] = {}
        self._keep_events = keep_events
        self._ids = itertools.count(1)

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def create_session(self, record: SessionRecord) -> None:
        self._sessions[record.session_id] = record
        self._messages[record.session_id] = []

    async def get_session(self, session_id: str) -> SessionRecord | None:
        return self._sessions.get(session_id)

    async def list_sessions(self, *, limit: int, after: str | None) -> list[SessionRecord]:
        ids = sorted(s for s in self._sessions if s > (after or ""))[:limit]
        return [self._sessions[s] for s in ids]

    async def delete_session(self, session_id: str) -> bool:
        self._messages.pop(session_id, None)
        self._events.pop(session_id, None)
        return self._sessions.pop(session_id, None) is not None

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

    async def history(self, session_id: str, *, limit: int) -> list[MessageRecord]:
        return self._messages.get(session_id, [])[-limit:]

    async def list_messages(self, session_id: str, *, after: int, limit: int) -> list[MessageRecord]:
        return [m for m in self._messages.get(session_id, []) if m.message_id > after][:limit]

    def add_event(self, record: EventRecord) -> None:
        if self._keep_events and record.session_id in self._sessions:
            record.event_id = next(self._ids)
            self._events.setdefault(record.session_id, []).append(record)

    async def list_events(self, session_id: str, *, after: int, limit: int) -> list[EventRecord]:
        return [e for e in self._events.get(session_id, []) if e.event_id > after][:limit]

    def log_access(self, record: AccessRecord) -> None:
        return None

    def statistics(self) -> StoreStatistics:
        return StoreStatistics(0, 0, 0, 0, 0)
