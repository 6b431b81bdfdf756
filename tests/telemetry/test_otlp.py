"""The OTLP encoding: recorded spans encoded straight into protobuf are the very messages the
SDK's `encode_spans` makes of the same spans as `ReadableSpan`s (the path it replaced)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import msgspec
import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from agentos.telemetry import otlp
from agentos.telemetry.otlp import SpanEncoder
from agentos.telemetry.wire import KINDS, STATUS_ERROR, SpanRecord
from tests.telemetry.otlp_sink import received
from tests.telemetry.sdk_spans import SdkSpans

T1, T2 = "0af7651916cd43dd8448eb211c80319c", "4bf92f3577b34da6a3ce929d0e0e4736"


def _record(name: str, span_id: str, parent_id: str = "", **fields: Any) -> SpanRecord:
    return (
        name,
        fields.get("trace_id", T1),
        span_id,
        parent_id,
        fields.get("remote", False),
        KINDS[fields.get("kind", "internal")],
        1_000,
        2_000,
        fields.get("attributes", {}),
        fields.get("events", []),
        fields.get("links", []),
        *fields.get("status", (0, "")),
        fields.get("tracestate", ""),
    )


RECORDS: Sequence[SpanRecord] = [
    _record(
        "POST /v1/sessions/{session_id}/turns",
        "b7ad6b7169203331",
        "00f067aa0ba902b7",
        remote=True,
        kind="server",
        tracestate="congo=t61rcWkgMzE,rojo=00f067aa0ba902b7",
        attributes={"http.request.method": "POST", "http.response.status_code": 200, "agentos.tenant.id": "t1"},
        events=[("agentos.turn.admitted", 1_500, {"agentos.turn.id": "turn_1", "agentos.permit.waits": False})],
    ),
    _record(
        "turn",
        "53995c3f42cd8ad8",
        "b7ad6b7169203331",
        attributes={"gen_ai.conversation.id": "s1", "agentos.turn.outcome": "failed", "error.type": "ValueError"},
        events=[("exception", 1_900, {"exception.type": "ValueError", "exception.message": "boom"})],
        links=[(T2, "00f067aa0ba902b7", 1, {"agentos.link": "superseded_by"}), (T2, "53995c3f42cd8ad8", 0, {})],
        status=(STATUS_ERROR, "boom"),
    ),
    _record(
        "chat mock-1",
        "e457b5a2e4d86bd1",
        "53995c3f42cd8ad8",
        kind="client",
        attributes={
            "gen_ai.response.finish_reasons": ["stop"],
            "gen_ai.usage.input_tokens": 12,
            "agentos.cost": 0.25,
            "empty": [],
            "numbers": [1, 2, 3],
            "flags": [True, False],
            "none": None,
            "nested": {"a": 1, "b": [1.5]},
            # beyond int64 (MessagePack carries it): left out and logged, by the SDK and by us
            "big": 2**63,
        },
        events=[("gen_ai.first_token", 1_200, {"agentos.ttft_ms": 3.5})],
    ),
    _record("agentos.store.commit", "0000000000000001", kind="producer", trace_id=T2),
    _record("tools/call search", "00000000000000ff", "e457b5a2e4d86bd1", kind="consumer", status=(STATUS_ERROR, "")),
]


def test_the_encoding_is_the_sdks_for_the_same_spans(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=test,region=eu")
    monkeypatch.setattr(otlp, "DROPS", otlp._DropLog())  # nothing logged yet in this process
    # through MessagePack as the pipe carries them: lists, not tuples, and msgpack's own types
    records = msgspec.msgpack.decode(msgspec.msgpack.encode(RECORDS), type=list[tuple[Any, ...]])
    with caplog.at_level(logging.ERROR):
        ours = SpanEncoder("agentos-test", "node-1")(records)
        sdks = encode_spans(SdkSpans("agentos-test", "node-1")(records))
    assert ours == sdks
    assert ours.SerializeToString(deterministic=True) == sdks.SerializeToString(deterministic=True)
    (server,) = [s for s in received(ours) if s.kind == 2]  # SPAN_KIND_SERVER
    assert server.trace_state == "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
    (span,) = [s for s in received(ours) if s.name == "chat mock-1"]
    assert "big" not in span.attributes and span.attributes["nested"] is not None
    assert span.resource["service.name"] == "agentos-test" and span.resource["service.instance.id"] == "node-1"
    assert span.resource["region"] == "eu"
    assert "'big' not encoded" in caplog.text


def test_dropped_attributes_are_logged_once_a_minute_and_all_counted(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tenant can send an unencodable value with every request: one line, every drop counted."""
    monkeypatch.setattr(otlp, "DROPS", otlp._DropLog())
    spans = [_record(f"chat {i}", f"{i + 1:016x}", attributes={"big": 2**63, "ok": i}) for i in range(3)]
    with caplog.at_level(logging.ERROR):
        request = SpanEncoder("agentos-test", "node-1")(spans)
    assert [s.attributes for s in received(request)] == [{"ok": i} for i in range(3)]
    assert otlp.DROPS.dropped == 3
    assert caplog.text.count("not encoded") == 1
