"""Per phase (the warm-up, each fault with its recovery, the drain): what the clients saw and what
the read-back found."""

from __future__ import annotations

from collections import Counter
from typing import Any

from agentos_bench.chaos.clients import Ledger

FINDINGS = (
    "lost_turns",
    "duplicated_turns",
    "stale_writes",
    "lost_steps",
    "repeated_steps",
    "repeated_effects",
    "runs",
    "unfinished_runs",
)


def phase_summary(ledger: Ledger, found: dict[str, Counter[str]]) -> dict[str, dict[str, Any]]:
    phases = dict.fromkeys(t.phase for t in ledger.turns) | dict.fromkeys(p for p, _ in ledger.statuses)
    return {phase: _one(ledger, found, phase) for phase in phases}


def _one(ledger: Ledger, found: dict[str, Counter[str]], phase: str) -> dict[str, Any]:
    turns = [t for t in ledger.turns if t.phase == phase]
    outcomes = Counter(t.outcome for t in turns)
    statuses = {str(s): n for (p, s), n in sorted(ledger.statuses.items()) if p == phase}
    return {
        "turns_sent": len(turns),
        "turns_completed": outcomes.get("completed", 0),
        "turn_outcomes": dict(outcomes.most_common()),
        "runs_started": sum(1 for r in ledger.runs.values() if r.phase == phase),
        "statuses": statuses,
        "responses_503": ledger.statuses.get((phase, 503), 0),
        "responses_503_with_retry_after": ledger.retry_after.get(phase, 0),
        "responses_5xx_not_503": sum(
            n for (p, s), n in ledger.statuses.items() if p == phase and s >= 500 and s != 503
        ),
        "turns_failed_internal_error": outcomes.get("failed:internal_error", 0),
        "hangs": ledger.hangs.get(phase, 0),
        "client_errors": {what: n for (p, what), n in sorted(ledger.errors.items()) if p == phase},
        **{name: found.get(name, Counter()).get(phase, 0) for name in FINDINGS},
    }
