"""An optional JSONL log of events: one file per day, appended by a background thread."""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from pathlib import Path

import msgspec

from agentos.store.records import EventRecord

_STOP = None


class JsonlLog:
    def __init__(self, directory: Path, *, queue_max_rows: int) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self._dir = directory
        self._max = queue_max_rows
        self._queue: queue.SimpleQueue[EventRecord | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self.dropped_total = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="agentos-jsonl", daemon=True)
        self._thread.start()

    def write(self, record: EventRecord) -> None:
        if self._queue.qsize() >= self._max:
            self.dropped_total += 1
            return
        self._queue.put(record)

    async def close(self) -> None:
        if self._thread is not None:
            self._queue.put(_STOP)
            await asyncio.to_thread(self._thread.join)
            self._thread = None

    def _run(self) -> None:
        encoder = msgspec.json.Encoder()
        while True:
            batch = [self._queue.get()]
            while batch[-1] is not _STOP:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            records = [r for r in batch if r is not None]
            if records:
                path = self._dir / f"events-{time.strftime('%Y-%m-%d', time.gmtime())}.jsonl"
                with path.open("ab") as f:
                    f.write(b"".join(encoder.encode(r) + b"\n" for r in records))
            if batch[-1] is _STOP:
                return
