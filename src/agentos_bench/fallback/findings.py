"""What a campaign's raw data says: turns and TTFT per phase, the breaker's moments, the verdict.

Pure functions of the samples and scrapes, every time in seconds from the measured window's
start, so the report's arithmetic can be checked (and tested) apart from any process.

Phases, by the moment a turn was sent: `before` the fault; `opening` from the fault's switch to
the first scrape that shows the primary's breaker open; `open` from there to the fault's end;
`after` it. The control run (no fault) has `before`, `during` (the fault's place) and `after`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentos_bench.fallback.metrics import Scrape, TargetFigures
from agentos_bench.load.targets import TurnSample
from agentos_bench.report.stats import percentiles_ms

TTFT_ADDED_LIMIT_MS = 50.0
BREAKER_OPEN_LIMIT_S = 1.0


@dataclass(frozen=True, slots=True)
class Phase:
    name: str
    start_s: float
    end_s: float


def phase_table(samples: Sequence[TurnSample], origin: float, phases: Sequence[Phase]) -> dict[str, dict[str, Any]]:
    """Per phase: turns sent in it, completed and failed (by kind), TTFT percentiles of the
    completed ones, completed turns per second of the phase."""
    table: dict[str, dict[str, Any]] = {}
    for phase in phases:
        mine = [s for s in samples if phase.start_s <= s.started - origin < phase.end_s]
        ok = [s for s in mine if s.ok]
        failures = Counter(str(s.failure) for s in mine if s.failure)
        length = phase.end_s - phase.start_s
        table[phase.name] = {
            "from_s": round(phase.start_s, 3),
            "to_s": round(phase.end_s, 3),
            "turns": len(mine),
            "completed": len(ok),
            "failed": sum(failures.values()),
            "failures": dict(sorted(failures.items())),
            "ttft_ms": percentiles_ms([s.ttft_s for s in ok if s.ttft_s is not None]),
            "turns_per_s": round(len(ok) / length, 1) if length > 0 else None,
        }
    return table


def failed_turns(samples: Sequence[TurnSample]) -> dict[str, Any]:
    """Every turn of the run that did not complete (a 5xx included), by kind."""
    failures = Counter(str(s.failure) for s in samples if s.failure)
    return {"turns": len(samples), "failed": sum(failures.values()), "by_kind": dict(sorted(failures.items()))}


def _figures(scrape: Scrape | None, target: str) -> TargetFigures:
    return TargetFigures() if scrape is None else scrape.targets.get(target, TargetFigures())


def _failures(scrape: Scrape | None, target: str) -> int:
    return sum(_figures(scrape, target).failures.values())


def breaker_moments(
    scrapes: Sequence[Scrape], origin: float, target: str, fault_on_s: float, fault_off_s: float
) -> dict[str, Any]:
    """When the scrapes saw `target`'s breaker open after the fault's switch and close after its
    end, and what the target was asked in between.

    Two moments, each timed at the answer of the scrape that showed it (an upper bound), with the
    scrape before it (sent while the breaker still showed closed: the lower bound): `first_open`,
    the first scrape after the switch showing it open (1, or 2: half-open implies it opened), and
    `opened` (what the verdict and the `open` phase use), from which every scrape until the
    fault's end showed it open: a success of a call sent before the fault closes the breaker
    again, so the first opening may not hold."""
    rel = [(s.sent - origin, s.received - origin, s) for s in scrapes]
    inside = [i for i, (sent, _, _) in enumerate(rel) if fault_on_s <= sent < fault_off_s]
    first_i = next((i for i in inside if _figures(rel[i][2], target).breaker), None)
    held_i = None
    for i in reversed(inside):
        if not _figures(rel[i][2], target).breaker:
            break
        held_i = i
    found: dict[str, Any] = {"target": target, "scrapes": len(scrapes), "state_changes": _changes(rel, target)}
    found |= _moment("first_open", rel, first_i, fault_on_s) | _moment("opened", rel, held_i, fault_on_s)
    if first_i is None or held_i is None:
        return found
    before = next((s for _, got, s in reversed(rel) if got <= fault_on_s), None)
    opened = rel[held_i][2]
    at_off = next((s for _, got, s in reversed(rel) if got <= fault_off_s), opened)
    closed = next((got for sent, got, s in rel if sent >= fault_off_s and _figures(s, target).breaker == 0), None)
    flicker = [_figures(rel[i][2], target).breaker for i in inside if first_i <= i <= held_i]  # open, closed again...
    return found | {
        "closed_again_before_held": sum(1 for a, b in zip(flicker, flicker[1:], strict=False) if a and not b),
        "failures_until_open": _failures(opened, target) - _failures(before, target),
        "calls_while_open": _figures(at_off, target).requests - _figures(opened, target).requests,
        "failures_while_open": _failures(at_off, target) - _failures(opened, target),
        "half_open_seen": sum(1 for i in inside if i >= held_i and _figures(rel[i][2], target).breaker == 2),
        "closed_after_fault_end_s": None if closed is None else round(closed - fault_off_s, 3),
    }


def _moment(name: str, rel: Sequence[tuple[float, float, Scrape]], i: int | None, since: float) -> dict[str, Any]:
    """`<name>_after_s` (scrape `i`'s answer) and `<name>_after_s_at_least` (the scrape before it
    was sent), in seconds after `since`; None for both when there is no such scrape."""
    if i is None:
        return {f"{name}_after_s": None, f"{name}_after_s_at_least": None}
    previous_sent = rel[i - 1][0] if i > 0 else since
    return {
        f"{name}_after_s": round(rel[i][1] - since, 3),
        f"{name}_after_s_at_least": round(max(0.0, previous_sent - since), 3),
    }


def _changes(rel: Sequence[tuple[float, float, Scrape]], target: str) -> list[list[float]]:
    """`[seconds, state]` each time a scrape shows the breaker in another state than the one before."""
    changes: list[list[float]] = []
    last: int | None = None
    for _, got, s in rel:
        state = _figures(s, target).breaker
        if state != last:
            changes.append([round(got, 3), state])
            last = state
    return changes


def target_totals(first: Scrape | None, last: Scrape | None) -> dict[str, dict[str, Any]]:
    """Each target's counters over the run (last scrape minus first), and its mean TTFT on the
    server (from the histogram's sum and count)."""
    totals: dict[str, dict[str, Any]] = {}
    for target in sorted(last.targets if last is not None else {}):
        a, b = _figures(first, target), _figures(last, target)
        count = b.ttft_count - a.ttft_count
        reasons = {r: n - a.failures.get(r, 0) for r, n in sorted(b.failures.items()) if n - a.failures.get(r, 0)}
        totals[target] = {
            "requests": b.requests - a.requests,
            "fallbacks": b.fallbacks - a.fallbacks,
            "failures": reasons,
            "ttft_mean_ms": round((b.ttft_sum_s - a.ttft_sum_s) / count * 1000, 1) if count else None,
        }
    return totals


def p95_difference(
    table: dict[str, dict[str, Any]], phase: str, base: str = "before", percentile: str = "p95"
) -> float | None:
    """`phase`'s TTFT p95 (or another `percentile`) minus `base`'s, in ms (None where either has
    too few samples)."""
    a, b = (table.get(name, {}).get("ttft_ms", {}).get(percentile) for name in (phase, base))
    return None if a is None or b is None else round(a - b, 1)


def verdict(fault: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The issue's three targets, judged on the fault run's numbers, and whether the fault bit at
    all (without it, "0 failed turns" would say nothing)."""
    breaker = fault["breaker"]
    primary = fault["targets"].get(fault["primary"], {})
    failed_primary = sum(primary.get("failures", {}).values())
    added, opened = fault["ttft_p95_added_ms"], breaker.get("opened_after_s")
    failed = fault["failed_turns"]
    return {
        "the fault took effect (the primary failed, turns fell back)": {
            "met": failed_primary > 0 and primary.get("fallbacks", 0) > 0,
            "value": f"{failed_primary} primary failures, {primary.get('fallbacks', 0)} fallbacks",
        },
        "0 failed turns": {
            "met": failed["failed"] == 0 and failed["turns"] > 0,
            "value": f"{failed['failed']} of {failed['turns']} {failed['by_kind'] or ''}".rstrip(),
        },
        f"TTFT p95 added by the fallback <= {TTFT_ADDED_LIMIT_MS:g} ms once the breaker is open": {
            "met": added is not None and added <= TTFT_ADDED_LIMIT_MS,
            "value": None if added is None else f"{added:+g} ms",
        },
        f"the breaker opens within {BREAKER_OPEN_LIMIT_S:g} s": {
            "met": opened is not None and opened <= BREAKER_OPEN_LIMIT_S,
            "value": None
            if opened is None
            else f"open for good after {opened:g} s (at least "
            f"{breaker['opened_after_s_at_least']:g} s); first seen open after {breaker['first_open_after_s']:g} s",
        },
    }
