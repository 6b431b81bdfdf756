"""From the samples of a load run to the numbers of its report, and the verdict. Pure: no I/O.

Rules (the seed's, docs/benchmarking.md):
- every offered request has a sample; offered != recorded makes the report unusable (a banner,
  and no verdict), since every error rate would be over a smaller denominator than the load;
- percentiles are nearest rank over *successful* requests only (a fast refusal is not a fast
  request); failures are counted and named separately; error rate = failed / offered;
- a request belongs to the phase it was due in; a phase's throughput is given twice: requests
  completed within its window, and requests offered in it (they part when the server lags);
- each load is judged on `sustain` against its own thresholds; a load with no sample there, or
  too few successes for its p95 (`stats.min_samples`), is "not measured", never "passed".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from agentos_bench.arrival.dispatch import DispatchStats, Sample
from agentos_bench.arrival.scenario import RECOVER, SUSTAIN, Load, Scenario
from agentos_bench.arrival.schedule import Offer, PhaseWindow
from agentos_bench.report.stats import percentiles_ms

PASSED, FAILED, NOT_MEASURED, NOT_JUDGED = "passed", "failed", "not measured", "not judged"


def summarize(
    scenario: Scenario,
    windows: Sequence[PhaseWindow],
    offers: Sequence[Offer],
    samples: Sequence[Sample],
    stats: DispatchStats,
    connection_limit: int,
) -> dict[str, Any]:
    recorded = Counter(s.kind for s in samples)
    offered = Counter(o.kind for o in offers)
    usable = len(samples) == len(offers) and sorted(s.index for s in samples) == [o.index for o in offers]
    phases = {w.name: phase_summary(scenario, w, samples) for w in windows}
    lags = sorted(stats.lags_s)
    return {
        "usable": usable,
        "what_ran": {
            "offered": len(offers),
            "recorded": len(samples),
            "by_load": {
                load.kind: {"offered": offered[load.kind], "recorded": recorded[load.kind]} for load in scenario.loads
            },
            "late_dispatches": stats.late,
            "max_lag_ms": round(stats.max_lag_s * 1000, 1),
            "lag_p99_ms": percentiles_ms(lags)["p99"] if lags else None,
            "connection_limit": connection_limit,
            "peak_in_flight": stats.peak_in_flight,
            "dispatched_at_limit": stats.capped,
            "abandoned": sum(1 for s in samples if s.error == "abandoned"),
        },
        "phases": phases,
        "recovery": recovery(windows, samples),
        "verdict": verdict(scenario, phases.get(SUSTAIN)) if usable else None,
    }


def recovery(windows: Sequence[PhaseWindow], samples: Sequence[Sample]) -> dict[str, Any] | None:
    """The seed's question after the burst: does the deployment come back, or keep failing at a
    rate it carried before (a backlog outliving the burst, as a pool whose waiters wait out a
    30 s timeout)? The recover phase's error rate by thirds (and `api_read` latency, the cheapest
    request), beside sustain's and the peak phase's (the burst: the highest rate).
    Recovered: its last third fails no more than max(2 x sustain's rate, 1%)."""
    by_name = {w.name: w for w in windows}
    if RECOVER not in by_name or SUSTAIN not in by_name:
        return None
    window, peak = by_name[RECOVER], max(windows, key=lambda w: w.rate)  # the burst: the highest rate
    third = (window.end_s - window.start_s) / 3
    recover = [s for s in samples if s.phase == RECOVER]
    thirds = [
        [s for s in recover if window.start_s + i * third <= s.due_s < window.start_s + (i + 1) * third]
        for i in range(3)
    ]
    sustain_rate = _error_rate([s for s in samples if s.phase == SUSTAIN]) or 0.0
    last = _error_rate(thirds[-1])
    return {
        "sustain_error_rate": sustain_rate,
        "peak_phase": peak.name,
        "peak_error_rate": _error_rate([s for s in samples if s.phase == peak.name]),
        "recover_thirds": [_third(t) for t in thirds],
        "recovered": None if last is None else last <= max(2 * sustain_rate, 0.01),
    }


def _third(samples: Sequence[Sample]) -> dict[str, Any]:
    reads = [s.latency_s for s in samples if s.ok and s.kind == "api_read"]
    return {"offered": len(samples), "error_rate": _error_rate(samples), "api_read_latency_ms": percentiles_ms(reads)}


def _error_rate(samples: Sequence[Sample]) -> float | None:
    return round(sum(1 for s in samples if not s.ok) / len(samples), 6) if samples else None


def phase_summary(scenario: Scenario, window: PhaseWindow, samples: Sequence[Sample]) -> dict[str, Any]:
    seconds = window.end_s - window.start_s
    mine = [s for s in samples if s.phase == window.name]
    completed = sum(1 for s in samples if s.ok and window.start_s <= s.done_s < window.end_s)
    return {
        "start_s": round(window.start_s, 3),
        "seconds": round(seconds, 3),
        "rate": window.rate,
        "offered": len(mine),
        "offered_per_s": _per_s(len(mine), seconds),
        "completed_in_window_per_s": _per_s(completed, seconds),
        "loads": {load.kind: load_summary(load, [s for s in mine if s.kind == load.kind]) for load in scenario.loads},
    }


def load_summary(load: Load, samples: Sequence[Sample]) -> dict[str, Any]:
    ok = [s for s in samples if s.ok]
    failures = Counter(s.error for s in samples if s.error is not None)
    found: dict[str, Any] = {
        "offered": len(samples),
        "ok": len(ok),
        "failed": sum(failures.values()),
        "failures": dict(sorted(failures.items())),
        "error_rate": round(sum(failures.values()) / len(samples), 6) if samples else None,
        "latency_ms": percentiles_ms([s.latency_s for s in ok]),
    }
    if load.metric == "first_token":
        found["first_token_ms"] = percentiles_ms([t for s in ok if (t := s.first_token_s) is not None])
    return found


def verdict(scenario: Scenario, sustain: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """Each load's verdict on the sustain phase: status and the reasons."""
    return {load.kind: judge(load, None if sustain is None else sustain["loads"][load.kind]) for load in scenario.loads}


def judge(load: Load, summary: dict[str, Any] | None) -> dict[str, Any]:
    if summary is None or summary["offered"] == 0:
        return {"status": NOT_MEASURED, "reasons": ["no request of this load in the sustain phase"]}
    reasons, status = [], PASSED
    if load.p95_ms is not None:
        metric = "first_token_ms" if load.metric == "first_token" else "latency_ms"
        p95 = summary[metric]["p95"]
        if p95 is None:
            n = summary[metric]["n"]
            return {"status": NOT_MEASURED, "reasons": [f"{n} successful requests: too few for a p95 (20 needed)"]}
        ok = p95 <= load.p95_ms
        status = status if ok else FAILED
        reasons.append(
            f"{metric.removesuffix('_ms').replace('_', ' ')} p95 {p95:g} ms {'<=' if ok else '>'} {load.p95_ms:g} ms"
        )
    if load.max_error_rate is not None:
        rate = summary["error_rate"]
        ok = rate <= load.max_error_rate
        status = status if ok else FAILED
        reasons.append(
            f"errors {rate * 100:.2f}% {'<=' if ok else '>'} {load.max_error_rate * 100:g}%"
            f" ({summary['failed']} of {summary['offered']})"
        )
    if not reasons:
        return {"status": NOT_JUDGED, "reasons": ["the scenario sets no threshold for it"]}
    return {"status": status, "reasons": reasons}


def _per_s(count: int, seconds: float) -> float | None:
    return round(count / seconds, 3) if seconds > 0 else None
