"""What a traced chat turn's spans cost to encode for OTLP, per span: the export process's old
path (each record as the SDK's `ReadableSpan`, then the SDK's `encode_spans`) against the one
it has now (`agentos.telemetry.otlp.SpanEncoder`, protobuf written straight from the records),
and beside them what the server itself pays per span (recording it, MessagePack for the pipe).

The spans are a chat turn's as the server records them at 1000 concurrent turns (the request,
the turn, the wait for a provider permit, the model call), recorded by the real
`RecordingTracing` with the attributes and events the server sets (`api/tracing.py`,
`runtime/turns.py`, `runtime/chat.py`, `providers/router.py`), then sent through MessagePack as
the pipe carries them. Batches of `--batch` spans (the `[telemetry] batch_size` default). CPU
time of this process (`time.process_time`), median of `--repeats` passes, the steps taking turns
within each pass: a micro-bench, which other load on a shared machine disturbs less than wall
time, but still disturbs.

    PYTHONPATH=src:. .venv/bin/python bench/scripts/otlp_encode_cost.py --turns 2000 --repeats 5
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Callable
from typing import Any

import msgspec
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from tests.telemetry.sdk_spans import SdkSpans

from agentos.telemetry.otlp import SpanEncoder
from agentos.telemetry.recording import RecordingTracing
from agentos.telemetry.wire import SpanRecord


class Kept:
    """A shipper that keeps what it is given (the bench's, in place of the export thread)."""

    def __init__(self) -> None:
        self.records: list[SpanRecord] = []
        self.put = self.records.append

    def statistics(self) -> dict[str, int]:
        return {}

    def flush(self, timeout_s: float = 5.0) -> bool:
        return True

    def close(self) -> None:
        return None


def chat_turn(tracing: RecordingTracing, n: int) -> None:
    """One chat turn's spans, as the server records them."""
    route = "/v1/sessions/{session_id}/turns"
    request_attributes = {"http.request.method": "POST", "http.route": route, "agentos.tenant.id": "default"}
    with tracing.span(f"POST {route}", request_attributes, kind="server") as request:
        turn_id, session_id = f"turn_{n:020x}", f"sess_{n:020x}"
        tracing.event("agentos.turn.admitted", {"agentos.turn.id": turn_id, "agentos.permit.waits": True})
        with tracing.span("turn", {"gen_ai.conversation.id": session_id, "agentos.turn.id": turn_id}) as turn:
            with tracing.span("agentos.provider_permit", {"agentos.tenant.id": "default"}):
                pass
            chat = tracing.start(
                "chat mock-1", {"gen_ai.operation.name": "chat", "gen_ai.request.model": "mock-1"}, kind="client"
            )
            chat.add_event("gen_ai.first_token", {"agentos.target": "default", "agentos.ttft_ms": 212.5})
            chat.set_attributes(
                {
                    "gen_ai.provider.name": "openai",
                    "gen_ai.response.model": "mock-1",
                    "gen_ai.response.finish_reasons": ["stop"],
                    "gen_ai.usage.input_tokens": 14,
                    "gen_ai.usage.output_tokens": 64,
                    "agentos.target": "default",
                }
            )
            chat.end()
            turn.set_attribute("agentos.turn.outcome", "completed")
        request.set_attribute("http.response.status_code", 200)


def medians(steps: dict[str, Callable[[], Any]], spans: int, repeats: int) -> dict[str, float]:
    """CPU microseconds per span of each step, the median of `repeats` passes; the steps take
    turns within each pass, so a change of the machine's load hits them alike."""
    passes: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(repeats):
        for name, work in steps.items():
            started = time.process_time()
            work()
            passes[name].append((time.process_time() - started) / spans * 1e6)
    return {name: statistics.median(values) for name, values in passes.items()}


def main(turns: int, batch: int, repeats: int) -> None:
    kept = Kept()
    tracing = RecordingTracing(kept, sample_ratio=1.0)

    def record() -> None:
        kept.records.clear()
        for n in range(turns):
            chat_turn(tracing, n)

    record()
    records, spans = list(kept.records), len(kept.records)
    batches = [records[i : i + batch] for i in range(0, spans, batch)]
    pack = msgspec.msgpack.Encoder().encode
    unpack = msgspec.msgpack.Decoder(list[tuple[Any, ...]]).decode
    payloads = [pack(b) for b in batches]
    received = [unpack(p) for p in payloads]  # what the export process has to encode
    old_convert, new_encode = SdkSpans("agentos", "node-1"), SpanEncoder("agentos", "node-1")
    for b in received:
        old = encode_spans(old_convert(b)).SerializePartialToString()
        assert old == new_encode(b).SerializePartialToString(), "the two paths must send the same bytes"
    gc.collect()
    gc.freeze()  # the spans decoded above live on; the export process holds one batch at a time
    steps: dict[str, Callable[[], Any]] = {
        "server: record (RecordingTracing, span -> tuple)": record,
        "server: MessagePack encode (shipping thread)": lambda: [pack(b) for b in batches],
        "export: MessagePack decode": lambda: [len(unpack(p)) for p in payloads],  # one batch alive at a time
        "export: old, ReadableSpan + encode_spans + serialize": lambda: [
            encode_spans(old_convert(b)).SerializePartialToString() for b in received
        ],
        "export: new, SpanEncoder + serialize": lambda: [new_encode(b).SerializePartialToString() for b in received],
    }
    results = medians(steps, spans, repeats)
    print(f"{turns} turns, {spans} spans ({spans // turns} a turn), batches of {batch}, median of {repeats} passes")
    print(f"{'step':<54} {'µs CPU a span':>14}")
    for name, value in results.items():
        print(f"{name:<54} {value:>14.2f}")
    old_us, new_us = (
        results["export: old, ReadableSpan + encode_spans + serialize"],
        results["export: new, SpanEncoder + serialize"],
    )
    print(f"old / new export encoding: {old_us / new_us:.2f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    main(args.turns, args.batch, args.repeats)
