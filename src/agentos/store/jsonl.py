"""An optional JSONL log of events: one file per day, appended by a background thread.

Deleting a session removes its lines: `delete_session` queues a deletion behind every
event already queued, and the thread rewrites each day's file without the session's lines
(streamed to a temporary file, then renamed over the old one, so a reader sees the old
file or the new one, never half of either). This costs a pass over the whole log per
batch of deletions, paid by this thread, not by turns; deletions that arrive together
share one pass. Per-session files would make deletion an unlink, but at 1000 sessions they
turn each batch of appends into a thousand open/close calls, and the log is read by day.

Events of a session that arrive after its deletion are written (as the events table keeps
them): the store does not remember deleted sessions.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import threading
import time
from pathlib import Path
from typing import BinaryIO

import msgspec

from agentos.errors import StoreError
from agentos.store.records import EventRecord

log = logging.getLogger("agentos.store")


class _SessionOf(msgspec.Struct):
    """What a line is decoded to when deciding whether it goes: msgspec skips the other fields."""

    session_id: str


class _Deletion:
    __slots__ = ("session_id", "future")

    def __init__(self, session_id: str, future: asyncio.Future[None]) -> None:
        self.session_id = session_id
        self.future = future


_STOP = None
_Item = EventRecord | _Deletion | None


class JsonlLog:
    def __init__(self, directory: Path, *, queue_max_rows: int) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self._dir = directory
        self._max = queue_max_rows
        self._queue: queue.SimpleQueue[_Item] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._line_session = msgspec.json.Decoder(_SessionOf)
        self._dropped = 0  # over the bound; only the loop writes it
        self._unwritten = 0  # lost to a write error; only the thread writes it

    @property
    def dropped_total(self) -> int:
        return self._dropped + self._unwritten

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._run, name="agentos-jsonl", daemon=True)
        self._thread.start()

    def write(self, record: EventRecord) -> None:
        """Queue one event line; over the bound (or closed) it is dropped and counted."""
        if self._thread is None or self._queue.qsize() >= self._max:
            self._dropped += 1
            return
        self._queue.put(record)

    async def delete_session(self, session_id: str) -> None:
        """Remove every line of `session_id` queued or written so far; return once it is done.

        Raises:
            StoreError: the log is closed, or a file could not be rewritten.
        """
        if self._thread is None or self._loop is None:
            raise StoreError("the JSONL log is closed")
        future: asyncio.Future[None] = self._loop.create_future()
        self._queue.put(_Deletion(session_id, future))
        await future

    async def close(self) -> None:
        if self._thread is not None:
            thread, self._thread = self._thread, None
            self._queue.put(_STOP)
            await asyncio.to_thread(thread.join)

    # -- the thread's side ---------------------------------------------------------------------

    def _run(self) -> None:
        encoder = msgspec.json.Encoder()
        while True:
            batch = [self._queue.get()]
            while batch[-1] is not _STOP:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            deletions = [item for item in batch if isinstance(item, _Deletion)]
            doomed = {d.session_id for d in deletions}
            self._append([r for r in batch if isinstance(r, EventRecord) and r.session_id not in doomed], encoder)
            if deletions:
                self._settle(deletions, self._remove_all(doomed))
            if batch[-1] is _STOP:
                return

    def _append(self, records: list[EventRecord], encoder: msgspec.json.Encoder) -> None:
        if not records:
            return
        path = self._dir / f"events-{time.strftime('%Y-%m-%d', time.gmtime())}.jsonl"
        try:
            with path.open("ab") as f:
                f.write(b"".join(encoder.encode(r) + b"\n" for r in records))
        except OSError:  # a full disk must not end the log: later batches may succeed
            log.exception("JSONL log: %d events could not be written", len(records))
            self._unwritten += len(records)

    def _remove_all(self, doomed: set[str]) -> Exception | None:
        try:
            self._remove(doomed)
        except Exception as exc:  # the deleting callers hear of it; the thread goes on
            log.exception("JSONL log: deleting %d sessions failed", len(doomed))
            return exc
        return None

    def _remove(self, doomed: set[str]) -> None:
        for path in sorted(self._dir.glob("events-*.jsonl")):
            temporary = path.with_name(path.name + ".tmp")
            with path.open("rb") as source, temporary.open("wb") as target:
                removed = _copy_kept(source, target, doomed, self._line_session)
            if removed:
                os.replace(temporary, path)
            else:
                temporary.unlink()

    def _settle(self, deletions: list[_Deletion], error: Exception | None) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return

        def settle() -> None:
            for d in deletions:
                if d.future.done():
                    continue
                if error is None:
                    d.future.set_result(None)
                else:
                    failure = StoreError(f"cannot delete session {d.session_id!r} from the JSONL log: {error}")
                    failure.__cause__ = error
                    d.future.set_exception(failure)

        with contextlib.suppress(RuntimeError):  # the loop closed in between: nobody is waiting any more
            loop.call_soon_threadsafe(settle)


def _copy_kept(source: BinaryIO, target: BinaryIO, doomed: set[str], decoder: msgspec.json.Decoder[_SessionOf]) -> int:
    """Copy the lines not of a doomed session; return how many were left out."""
    removed = 0
    write = target.write
    for line in source:
        try:
            session_id = decoder.decode(line).session_id
        except msgspec.DecodeError:
            session_id = None  # not ours to judge (a torn last line): keep it
        if session_id in doomed:
            removed += 1
        else:
            write(line)
    return removed
