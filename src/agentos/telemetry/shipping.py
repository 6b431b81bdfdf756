"""Finished spans, from the event loop to an exporter, without ever blocking the loop.

A finished span is one tuple appended to a bounded deque (`Shipper.put`, under the GIL, no lock).
A daemon thread takes batches off it and hands them to a sink:

- `ProcessSink` (the server's): the batch is encoded with msgspec's MessagePack (in C) and
  written to the stdin of the export process (`python -m agentos.telemetry.otel`), which encodes
  the OTLP request from the tuples and sends it. A write blocks only this thread, with the GIL released: a slow
  collector fills the pipe, then the queue, then spans are dropped and counted.
- `ExporterSink`: the same OTLP encoding, handed to an exporter in this thread (a test's
  in-memory exporter, or a stuck one).

When the queue is full a new span is dropped and counted, and a warning is logged at most once
per `DROP_LOG_INTERVAL_S`: a collector that is down or slow costs nothing but dropped spans.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import IO, Any, Protocol

import msgspec

from agentos.telemetry.wire import SpanRecord, UnencodableValues, frame

log = logging.getLogger("agentos.telemetry")

DROP_LOG_INTERVAL_S = 60.0
RESTART_INTERVAL_S = 10.0  # an export process that died is started again at most this often


class Sink(Protocol):
    def send(self, batch: list[SpanRecord]) -> None:
        """Send one batch; count it as exported or failed (now or when the answer comes)."""
        ...

    def flush(self, timeout_s: float) -> bool:
        """Wait until every batch sent so far is answered."""
        ...

    def close(self) -> None: ...


class Counts:
    """What happened to the spans (read by /metrics through `statistics`)."""

    def __init__(self) -> None:
        self.exported = 0
        self.failed = 0
        self.values_dropped = 0  # attribute values the pipe cannot carry (`wire.UnencodableValues`)


class Shipper:
    """The bounded queue and the thread that empties it into a sink."""

    def __init__(self, sink_factory: Callable[[Counts], Sink], *, max_queue: int, batch_size: int, interval_s: float):
        self.counts = Counts()
        self._sink = sink_factory(self.counts)
        self._queue: deque[SpanRecord] = deque()
        self._max_queue = max_queue
        self._batch_size = batch_size
        self._interval_s = interval_s
        self._wake = threading.Event()
        self._sending = threading.Lock()
        self._stop = False
        self.dropped = 0
        self._last_drop_log = -DROP_LOG_INTERVAL_S
        self._thread = threading.Thread(target=self._run, name="agentos-span-export", daemon=True)
        self._thread.start()

    def put(self, record: SpanRecord) -> None:
        if len(self._queue) >= self._max_queue:
            self.dropped += 1
            now = time.monotonic()
            if now - self._last_drop_log >= DROP_LOG_INTERVAL_S:
                self._last_drop_log = now
                log.warning("span export queue full (%d): dropping spans (%d so far)", self._max_queue, self.dropped)
            return
        self._queue.append(record)
        if len(self._queue) >= self._batch_size:
            self._wake.set()

    def _run(self) -> None:
        while not self._stop:
            self._wake.wait(self._interval_s)
            self._wake.clear()
            with self._sending:  # one sender at a time: this thread, or a flush's caller
                self._drain()

    def _drain(self) -> None:
        while self._queue:
            batch = [self._queue.popleft() for _ in range(min(self._batch_size, len(self._queue)))]
            try:
                self._sink.send(batch)
            except Exception:  # a sink's own failure never kills the thread
                log.exception("span export failed")
                self.counts.failed += len(batch)

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Send what is queued and wait until the exporter has answered for it (in the caller's
        thread: at close, off the event loop, or in a test)."""
        if not self._sending.acquire(timeout=timeout_s):
            return False
        try:
            self._drain()
        finally:
            self._sending.release()
        return self._sink.flush(timeout_s) and not self._queue

    def statistics(self) -> dict[str, int]:
        c = self.counts
        return {
            "exported": c.exported,
            "dropped": self.dropped,
            "failed": c.failed,
            "queued": len(self._queue),
            "attribute_values_dropped": c.values_dropped,
        }

    def close(self) -> None:
        self._stop = True
        self._wake.set()
        self._thread.join(timeout=5)
        self.flush()
        self._sink.close()


class RequestExporter(Protocol):
    """What `ExporterSink` hands an encoded batch to: `otel.OtlpExporter`, or a test's own (in
    memory, stuck). `request` is an OTLP `ExportTraceServiceRequest` (typed loosely: this module
    is imported by the server, which never loads OpenTelemetry)."""

    def export_request(self, request: Any, spans: int) -> bool:
        """Send `request` (of `spans` spans); True when the collector took it."""
        ...

    def shutdown(self) -> None: ...


class ExporterSink:
    """An exporter called in the shipping thread with each batch encoded as the export process
    encodes it (`otlp.SpanEncoder`)."""

    def __init__(self, counts: Counts, exporter: RequestExporter, service_name: str, node: str) -> None:
        from agentos.telemetry import otlp  # the OTLP encoder and the SDK: only for this sink

        self._counts = counts
        self._exporter = exporter
        self._encode = otlp.SpanEncoder(service_name, node)

    def send(self, batch: list[SpanRecord]) -> None:
        if self._exporter.export_request(self._encode(batch), len(batch)):
            self._counts.exported += len(batch)
        else:
            self._counts.failed += len(batch)

    def flush(self, timeout_s: float) -> bool:
        return True

    def close(self) -> None:
        self._exporter.shutdown()


class ProcessSink:
    """The export process: started at once, restarted (at most every RESTART_INTERVAL_S) if it
    dies; each answer it writes back ("ok N", "failed N", "flushed K") updates the counts. The
    spans a process took into its pipe and never answered for (it died first) count as failed
    when its answers end: every span is counted once, exported, failed or dropped."""

    def __init__(self, counts: Counts, settings: dict[str, Any]) -> None:
        self._counts = counts
        self._argv = [sys.executable, "-m", "agentos.telemetry.otel", msgspec.json.encode(settings).decode()]
        self._encode = msgspec.msgpack.Encoder().encode
        self._unencodable = UnencodableValues(self._encode)
        self._answered = threading.Condition()
        self._flushes_sent = 0
        self._flushes_done = 0
        # Spans written to each live export process and not yet answered for (under `_answered`);
        # a process leaves it when its answers end.
        self._unanswered: dict[subprocess.Popen[bytes], int] = {}
        self._process: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None
        self._started = -RESTART_INTERVAL_S
        self._start()

    def _start(self) -> bool:
        now = time.monotonic()
        if now - self._started < RESTART_INTERVAL_S:
            return False
        self._started = now
        process = subprocess.Popen(self._argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True)
        with self._answered:
            self._unanswered[process] = 0
        self._process = process
        self._reader = threading.Thread(target=self._read, args=(process,), name="agentos-span-answers", daemon=True)
        self._reader.start()
        return True

    def _alive(self) -> bool:
        if self._process is not None and self._process.poll() is None:
            return True
        if self._process is not None:
            log.warning("telemetry: the span export process ended (%s); starting another", self._process.returncode)
            assert self._process.stdin is not None
            with contextlib.suppress(OSError):  # its unsent bytes have nowhere to go
                self._process.stdin.close()
        return self._start()

    def _write(self, process: subprocess.Popen[bytes], kind: bytes, payload: bytes) -> None:
        assert process.stdin is not None
        fd = process.stdin.fileno()
        data = memoryview(frame(kind, payload))
        while data:  # os.write releases the GIL while the pipe is full
            data = data[os.write(fd, data) :]

    def send(self, batch: list[SpanRecord]) -> None:
        if not self._alive():
            self._counts.failed += len(batch)
            return
        try:
            payload = self._encode(batch)
        except (OverflowError, TypeError):  # a value MessagePack cannot carry: drop it, not the batch
            payload = self._encode([self._unencodable.carried(record) for record in batch])
            self._counts.values_dropped = self._unencodable.dropped
        process = self._process
        assert process is not None
        with self._answered:
            if process not in self._unanswered:  # its answers have ended: it is dead
                self._counts.failed += len(batch)
                return
            self._unanswered[process] += len(batch)
        try:
            self._write(process, b"B", payload)
        except OSError:  # it died as we wrote: the next batch starts another
            with self._answered:
                if process in self._unanswered:  # else its end counted this batch already
                    self._unanswered[process] -= len(batch)
                    self._counts.failed += len(batch)

    def _read(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stdout is not None
        with process.stdout as answers:
            self._answers(process, answers)
        with self._answered:
            lost = self._unanswered.pop(process, 0)
            self._counts.failed += lost
            # The process ended: the flushes sent to it will not be answered. Only while it is
            # still the current one: a reader that sees its end late must not settle the flushes
            # sent to the process started after it (they would return before it answered).
            if self._process is process:
                self._flushes_done = self._flushes_sent
            self._answered.notify_all()
        if lost:
            log.warning("telemetry: the span export process ended with %d spans unanswered: counted as failed", lost)

    def _answers(self, process: subprocess.Popen[bytes], answers: IO[bytes]) -> None:
        for line in answers:
            word, _, number = line.decode().partition(" ")
            with self._answered:
                if word in ("ok", "failed"):
                    self._unanswered[process] -= int(number)
                if word == "ok":
                    self._counts.exported += int(number)
                elif word == "failed":
                    self._counts.failed += int(number)
                elif word == "flushed":
                    self._flushes_done = int(number)
                self._answered.notify_all()

    def flush(self, timeout_s: float) -> bool:
        process = self._process
        if process is None or process.poll() is not None:
            return False
        with self._answered:
            self._flushes_sent += 1
            wanted = self._flushes_sent
        try:
            self._write(process, b"F", str(wanted).encode())
        except OSError:
            return False
        with self._answered:
            return self._answered.wait_for(lambda: self._flushes_done >= wanted, timeout_s)

    def close(self) -> None:
        process = self._process
        if process is None:
            return
        assert process.stdin is not None
        process.stdin.close()  # end of input: it sends what it holds and exits
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if self._reader is not None:
            self._reader.join(timeout=5)  # it closes the answers' pipe at their end
