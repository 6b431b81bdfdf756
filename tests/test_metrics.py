"""`Metrics.snapshot`: the console's JSON view of every metric."""

from __future__ import annotations

from agentos.metrics import Metrics


def test_a_histogram_sums_its_labels_and_stays_cumulative() -> None:
    metrics = Metrics()
    metrics.observe_turn("completed", 40)
    metrics.observe_turn("failed", 3)
    metrics.observe_turn("cancelled", 200_000)  # above the last bound: only in `count`
    duration = metrics.snapshot()["histograms"]["turn_duration_ms"]
    bounds = dict(zip(duration["le"], duration["counts"], strict=True))
    assert (bounds[2], bounds[5], bounds[50], bounds[120000]) == (0, 1, 2, 2)
    assert duration["count"] == 3 and duration["sum"] == 200_043
    assert duration["counts"] == sorted(duration["counts"])  # cumulative


def test_counters_and_gauges_are_one_number_each() -> None:
    metrics = Metrics()
    metrics.connections_closed.labels("header_timeout").inc(2)
    metrics.connections_closed.labels("body_timeout").inc()
    metrics.tokens_prompt.inc(7)
    values = metrics.snapshot()["values"]
    assert values["connections_closed"] == 3 and values["tokens_prompt"] == 7
    assert not any(name.startswith("agentos_") or name.endswith(("_total", "_created")) for name in values)
