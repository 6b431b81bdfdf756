"""The pipe to the export process: a batch with a value MessagePack cannot carry (an int beyond
64 bits, which a tenant can put into some attributes) loses that value only; the rest of its
span and of its batch arrive at a real OTLP receiver on loopback."""

from __future__ import annotations

import asyncio

from agentos.config.telemetry import TelemetryConfig
from agentos.telemetry.opening import open_tracing
from agentos.telemetry.recording import RecordingTracing
from tests.telemetry.otlp_sink import otlp_sink

HUGE = 2**70  # beyond MessagePack's ints (and OTLP's int64)


async def test_an_unencodable_attribute_costs_that_attribute_not_its_batch() -> None:
    async with otlp_sink() as sink:
        config = TelemetryConfig(enabled=True, endpoint=sink.url, export_interval_s=60)  # one batch, at flush
        tracing = await asyncio.to_thread(open_tracing, config)
        assert isinstance(tracing, RecordingTracing)
        try:
            tracing.start("before", {"agentos.n": 1}).end()
            bad = tracing.start("chat mock-1", {"gen_ai.request.max_tokens": HUGE, "gen_ai.request.model": "m"})
            bad.set_attributes({"gen_ai.usage.input_tokens": -HUGE, "gen_ai.usage.output_tokens": 3})
            bad.set_attribute("agentos.sizes", [1, HUGE])
            bad.set_attribute("agentos.big.but.int64", 2**63)  # MessagePack carries it; OTLP cannot
            bad.add_event("gen_ai.first_token", {"agentos.ttft_ms": 1.5, "agentos.x": HUGE})
            bad.end()
            tracing.start("after", {"agentos.n": 2}).end()
            assert await asyncio.to_thread(tracing.flush, 30)
            stats = tracing.statistics()
        finally:
            await asyncio.to_thread(tracing.shutdown)
        await sink.wait_for({"before", "chat mock-1", "after"})
    assert stats["failed"] == 0 and stats["exported"] == 3
    # max_tokens, input_tokens, the list holding one, the event's: counted (agentos_trace_attribute_values_dropped)
    assert stats["attribute_values_dropped"] == 4
    (chat,) = sink.named("chat mock-1")
    assert chat.attributes == {"gen_ai.request.model": "m", "gen_ai.usage.output_tokens": 3}
    assert chat.events == ["gen_ai.first_token"]
    assert sink.named("before")[0].attributes == {"agentos.n": 1}
    assert sink.named("after")[0].attributes == {"agentos.n": 2}
