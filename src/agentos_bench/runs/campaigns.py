"""The run campaigns of the reference documents (`agentos bench runs --campaign light|heavy|hitl`).

Every campaign runs at 50, 100 and 200 concurrent runs, as the seed's profiles do.

- `light`: the runs of a point started over a 60 s ramp; two commands, then the answer; 200 ms
  to the first token; `max_turns` 3 (profile `runs-light`).
- `heavy`: all at once; four model turns, two sandboxed commands of 10 s, a human question
  between them, and a final answer of 300 tokens at 1.5 s per token (about eight to ten minutes a
  run; profile `runs-heavy`, whose command timeout admits 10 s).
- `hitl`: the `tools` scenario over a 60 s ramp, each command approval-gated (profile
  `runs-hitl`): the human, played by the driver, approves each command by quoting its `args_hash`
  and answers the question, each after 45 s (the seed's ~45 s; `--answer-delay-secs` sets it).

Each campaign runs twice (a fresh server each time). A point whose run duration p95 differs by
more than 20% between the two is marked "noisy: no conclusion". Acceptance is printed, never
asserted: run duration p95 does not degrade between concurrency levels beyond the noise, no
start errors, every run completed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from agentos.mock.server import MockSettings
from agentos_bench.runs.plan import RunsPlan

NOISE = 0.20  # p95 spread between the two runs of a point beyond which nothing is concluded


@dataclass(frozen=True)
class Campaign:
    name: str  # its server profile is `runs-<name>`
    ramp_s: float  # the runs of a point start evenly over this long (0: all at once)
    answer_delay_s: float
    run_timeout_s: float
    mock: MockSettings
    points: tuple[int, ...] = (50, 100, 200)
    repeats: int = 2

    @property
    def profile(self) -> str:
        return f"runs-{self.name}"


_CHAT = MockSettings(ttft_ms=200.0, tps=200.0, tokens=8)
CAMPAIGNS = {
    campaign.name: campaign
    for campaign in (
        Campaign("light", 60.0, answer_delay_s=0.0, run_timeout_s=300.0, mock=replace(_CHAT, scenario="light")),
        Campaign(
            "heavy",
            0.0,
            answer_delay_s=1.0,
            run_timeout_s=1500.0,
            mock=MockSettings(ttft_ms=200.0, tps=1 / 1.5, tokens=300, scenario="heavy"),
        ),
        Campaign("hitl", 60.0, answer_delay_s=45.0, run_timeout_s=300.0, mock=replace(_CHAT, scenario="tools")),
    )
}


def campaign_plan(campaign: Campaign, scale: float, command: str, answer_delay_s: float | None = None) -> RunsPlan:
    """The campaign as a runs plan; `scale` < 1 shrinks counts, ramp, answer delay and tokens (a
    smoke of the harness, not a campaign: the report says the scale). `answer_delay_s`: the
    human's delay instead of the campaign's (not scaled)."""
    mock = campaign.mock
    delay = campaign.answer_delay_s * scale if answer_delay_s is None else answer_delay_s
    if scale != 1.0:
        mock = replace(mock, tokens=max(1, round(mock.tokens * scale)), tps=max(mock.tps, 1 / 1.5 / scale))
    return RunsPlan(
        points=tuple(max(1, round(n * scale)) for n in campaign.points),
        ramp_s=campaign.ramp_s * scale,
        answer_delay_s=delay,
        run_timeout_s=campaign.run_timeout_s,
        waiting_runs=0,
        profile=campaign.profile,
        mock=mock,
        command=command,
        campaign=campaign.name,
    )


def judge(runs: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """From the points of each repeat: the noise per point, and the acceptance lines."""
    first = runs[0]
    points = []
    for i, row in enumerate(first):
        p95s = [r[i]["duration_ms"]["p95"] for r in runs if i < len(r)]
        spread = _spread(p95s)
        points.append(
            {"runs": row["runs"], "p95_ms": p95s, "spread": spread, "noisy": spread is None or spread > NOISE}
        )
    every = [row for rows in runs for row in rows]
    start_errors = sum(v for row in every for k, v in row["failures"].items() if k.startswith("start_"))
    completed = sum(row["completed"] for row in every)
    started = sum(row["runs"] for row in every)
    return {
        "points": points,
        "start_errors": start_errors,
        "completion": round(completed / started, 4) if started else None,
        "p95_holds": _p95_holds(points),
    }


def _spread(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    if len(known) < 2 or min(known) <= 0:
        return None
    return round((max(known) - min(known)) / min(known), 3)


def _p95_holds(points: list[dict[str, Any]]) -> str:
    """Whether duration p95 stays level from one concurrency to the next, beyond the noise."""
    if len(points) < 2:
        return "one concurrency level: nothing to compare"
    if any(p["noisy"] for p in points):
        return "noisy: no conclusion"
    for low, high in zip(points, points[1:], strict=False):
        if max(high["p95_ms"]) > max(low["p95_ms"]) * (1 + NOISE):
            return f"degrades: p95 {max(high['p95_ms']):g} ms at {high['runs']} against {max(low['p95_ms']):g} ms"
    return "holds"
