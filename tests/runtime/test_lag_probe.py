"""The loop-lag probe: 10 Hz while the loop lags, once a second while it keeps up.

The probe runs on the real loop (what it measures is the loop): the test blocks the loop on
purpose and then waits for the probe's sample, never for the clock."""

from __future__ import annotations

import asyncio
import time

from agentos.runtime.runtime import LAG_PROBE_FAST_S, LAG_PROBE_SLOW_S, next_probe_in
from agentos.testing import FakeClock, ScriptedProvider
from tests.runtime.test_runtime import make_runtime


def test_a_late_probe_probes_again_soon_and_a_punctual_one_waits_a_second() -> None:
    assert next_probe_in(0.0) == next_probe_in(0.99) == LAG_PROBE_SLOW_S
    assert next_probe_in(1.0) == next_probe_in(250.0) == LAG_PROBE_FAST_S


async def test_a_blocked_loop_is_measured_and_then_sampled_at_ten_hertz() -> None:
    runtime = make_runtime(ScriptedProvider([]), FakeClock())
    loop = asyncio.get_running_loop()
    observed: list[float] = []
    sampled = asyncio.Event()
    histogram_observe = runtime.metrics.loop_lag_ms.observe

    def observe(lag_ms: float) -> None:  # the prometheus histogram's, seen by the test
        histogram_observe(lag_ms)
        observed.append(lag_ms)
        sampled.set()

    runtime.metrics.loop_lag_ms.observe = observe  # type: ignore[method-assign,assignment]  # a probe on the real histogram
    runtime.start_lag_probe()
    try:
        timer = runtime._lag_timer
        assert timer is not None and timer.when() - loop.time() <= LAG_PROBE_SLOW_S + 0.01  # a quiet loop: 1 s
        # Block the loop past the probe's due time, as a slow callback would: it must run late.
        time.sleep(LAG_PROBE_SLOW_S + 0.2)  # noqa: ASYNC251, TID251 - the blocked loop is what is measured
        async with asyncio.timeout(5.0):
            await sampled.wait()
        assert len(observed) == 1 and observed[0] >= 150  # it saw the ~200 ms it was late
        timer = runtime._lag_timer
        assert timer is not None and timer.when() - loop.time() <= LAG_PROBE_FAST_S + 0.01  # lagging: 100 ms
    finally:
        await runtime.drain(1.0)
