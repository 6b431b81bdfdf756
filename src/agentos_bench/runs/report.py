"""The `agentos bench runs` report: JSON (the data), Markdown (for people) and a PNG plot.

The Markdown starts with the header every bench report has (machine, versions, topology, profile,
exact command), drawn by `agentos_bench.report.document`. Percentile cells carry their sample
count `(n=…)` and show "–" where there are too few samples (`agentos_bench.report.stats`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# document.py keeps its header and percentile cells private; reusing them keeps every report's header identical
from agentos_bench.report.document import PLOTS_SKIPPED, _pcts, opening
from agentos_bench.report.output import claim_stem, write_json
from agentos_bench.report.stats import cell

_POINT_COLUMNS = (
    "| N | completed | failures | start ms p50/p95/p99 (n) | floor: N × /healthz ms p50/p95/p99 (n) "
    "| run ms p50/p95/p99 (n) | wall s | steps | steps/s "
    "| server CPU s (cores) | main process CPU s (cores) | CPU ms/run | RSS MB before/peak/end "
    "| Private_Dirty MB before/peak/end "
    "| mock max conc. | mock CPU s | client CPU s |"
)

_NOTES = """
## What the columns mean

- **N**: runs started at once (one `POST /v1/agents/{name}/runs` each, all sent together), each
  followed on its own SSE connection (`GET /v1/runs/{id}/events`); its `human.requested` is
  answered `answer_delay_s` after it arrives.
- **start ms**: latency of the start call (request sent → `202` read), over all N.
  **floor**: N concurrent `GET /healthz` from the same client just before the point (the
  connections warmed first): what a burst of N requests costs on this loopback and these cores
  with no work behind it. A start call cannot be faster than it.
  **run ms**: start call sent → terminal event received, over completed runs only (it includes
  the answer delay). Nearest-rank percentiles; **(n=…)** is the number of samples behind a
  cell. p50 needs one, p95 at least 20 and p99 at least 100 (so that at least one sample lies
  above it); with fewer the cell shows "–" rather than the maximum under another name.
- **failures** by kind: `start_429` / `start_5xx` / `start_4xx` / `start_error` (the start call),
  `events_http`, `stream_break` (the stream ended without a terminal event), `answer_error`,
  `timeout` (run timeout; the run is then terminated), `run_failed` / `run_cancelled`.
- **steps**: {steps}. **steps/s** is steps ÷ wall time of the point (first start call to last
  terminal event), so at small N it is bounded by the answer delay, not by the server.
- **server CPU**: delta of the cumulative CPU time of the server's process tree (the sandbox fork
  server and the reaped commands included) over the point; cores = CPU s ÷ wall s. **main
  process CPU**: the server process alone (its event loop and writer threads, without the fork
  server and the commands); one event loop can use at most one core.
  **RSS / Private_Dirty**: `/proc/<pid>/smaps_rollup` summed over the tree, before the point,
  peak (sampled every 0.5 s) and at its end. CPython keeps freed arenas, so "end" stays near the peak.
  RSS counts a page shared between processes once per process, and every sandboxed command
  starts as a fork of the fork server, so RSS peaks while commands run; Private_Dirty does not
  double count and is the figure to plan RAM with.
- **mock CPU / client CPU**: the mock provider and this bench client share the machine with the server.
"""


_CAMPAIGN_COLUMNS = (
    "| N | run p95 ms (run 1, run 2) | spread | noisy | completed (1, 2) | paused share | requests answered "
    "(approvals) | mean human wait ms | server processes peak |"
)


def _campaign_lines(report: dict[str, Any]) -> list[str]:
    """The campaign's two runs side by side, the noise per point, hitl's human, and acceptance."""
    judged = report.get("judged")
    if judged is None:
        return []
    lines = [
        "",
        f"## Campaign `{report['campaign']}` (scale {report.get('scale', 1)}, ramp {report['ramp_s']} s): "
        "two runs, fresh servers",
        "",
        _CAMPAIGN_COLUMNS,
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for i, point in enumerate(judged["points"]):
        rows = [run[i] for run in report["repeats"] if i < len(run)]
        human = rows[0]["human"]
        lines.append(
            f"| {point['runs']} | {', '.join(cell(v) for v in point['p95_ms'])} | {cell(point['spread'])} | "
            f"{'**noisy: no conclusion**' if point['noisy'] else 'no'} | "
            f"{', '.join(str(r['completed']) for r in rows)} | {cell(human['paused_share'])} | {human['answered']} "
            f"({human.get('approvals', 0)}) | "
            f"{cell(human['mean_wait_ms'])} | {rows[0]['server_processes_peak']} |"
        )
    lines += [
        "",
        f"Acceptance (printed, not asserted): run p95 across concurrency levels: **{judged['p95_holds']}**; "
        f"start errors **{judged['start_errors']}** (0 wanted); completion **{judged['completion']}** "
        "(1.0 wanted). A spread over 20% between the two runs of a point marks it noisy.",
    ]
    return lines


def _cpu_lines(repeats: list[list[dict[str, Any]]]) -> list[str]:
    """Peak cores per service at 1 s resolution, per point and repeat, and runs per core."""
    rows = [(i + 1, row) for i, points in enumerate(repeats) for row in points if "cpu_peak_cores" in row]
    if not rows:
        return []
    groups = list(rows[0][1]["cpu_peak_cores"])
    lines = [
        "",
        "### CPU per service (peak cores over 1 s; mean over the point in brackets)",
        "",
        "| N | run | " + " | ".join(groups) + " | peak of the sum | runs alive at once | runs per core |",
        "|---|---|" + "---|" * (len(groups) + 3),
    ]
    for repeat, row in rows:
        cells = [f"{cell(row['cpu_peak_cores'][g])} ({cell(row['cpu_mean_cores'][g])})" for g in groups]
        lines.append(
            f"| {row['runs']} | {repeat} | "
            + " | ".join(cells)
            + f" | {cell(row['cpu_peak_total_cores'])} | {cell(row.get('peak_concurrent_runs'))} | "
            f"{cell(row['runs_per_core'])} |"
        )
    lines += [
        "",
        "server: the server process; sandboxes: its descendants (the fork server and the commands); "
        "mock: the mock provider; generator: this bench client; postgres, redis: their process trees when "
        "the profile uses them on this machine. Runs alive at once: the most runs started and not yet "
        "ended at one moment (over a ramp, fewer than N). Runs per core: those over the peak of the sum, "
        "the bench client left out.",
    ]
    return lines


def _failures(row: dict[str, Any]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in row["failures"].items()) or "0"


def _triple(row: dict[str, Any], name: str) -> str:
    return " / ".join(cell(row.get(f"{name}_{part}")) for part in ("before", "peak", "end"))


def _point_line(row: dict[str, Any]) -> str:
    cells = [
        row["runs"],
        row["completed"],
        _failures(row),
        _pcts(row["start_ms"]),
        _pcts(row["healthz_burst_ms"]) if row.get("healthz_burst_ms") else "–",
        _pcts(row["duration_ms"]),
        cell(row["wall_s"]),
        row["steps"],
        cell(row["steps_per_s"]),
        f"{cell(row['server_cpu_s'])} ({cell(row['server_cpu_cores'])})",
        f"{cell(row['server_main_cpu_s'])} ({cell(row['server_main_cpu_cores'])})",
        cell(row["server_cpu_ms_per_run"]),
        _triple(row, "server_rss_mb"),
        _triple(row, "server_private_dirty_mb"),
        cell(row["mock_max_concurrent"]),
        cell(row["mock_cpu_s"]),
        cell(row["client_cpu_s"]),
    ]
    return "| " + " | ".join(str(c) for c in cells) + " |"


_PHASES = {
    "queued": "start call sent → `run.started`",
    "model_call": "one model call (previous event → `tool.call` / `human.requested` / `run.completed`)",
    "tool": "one `run_command` (`tool.call` → `tool.result`)",
    "human_wait": "`human.requested` → `human.answered` (includes the answer delay)",
}


def _phase_lines(points: list[dict[str, Any]]) -> list[str]:
    """Where a run's time goes, from the arrival times of its events at the client."""
    lines = ["", "### Where the time goes (ms p50/p95/p99 (n), completed runs, at the client)", ""]
    lines += ["| phase | " + " | ".join(f"N={p['runs']}" for p in points) + " |", "|---|" + "---|" * len(points)]
    for phase, label in _PHASES.items():
        cells = [_pcts(p.get("phase_ms", {}).get(phase, {})) for p in points]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def _waiting_lines(waiting: dict[str, Any] | None) -> list[str]:
    if not waiting:
        return []
    after = waiting["after_end"]
    lines = ["", "## Runs waiting for a human", ""]
    lines += [
        f"{waiting['started']} of {waiting['runs']} runs started on a fresh server, in {waiting['batches']} "
        f"bursts (each at once); {waiting['waiting_human']} reached `waiting_human`, all within "
        f"{waiting['seconds_to_all_waiting']} s. Then all were answered ({waiting['answered']} answers accepted); "
        f"end states: {_statuses(waiting['statuses'])}; terminated by the bench: {waiting['terminated']}.",
        "",
        "| quantity | RSS | Private_Dirty |",
        "|---|---|---|",
    ]
    for key, template in _WAITING_ROWS:
        label = template.replace("{n}", str(len(waiting["steps"])))
        lines.append(f"| {label} | {cell(waiting[key]['rss'])} | {cell(waiting[key]['private_dirty'])} |")
    lines.append(
        f"| after all were answered and ended, MB | {cell(after['rss_mb'])} | {cell(after['private_dirty_mb'])} |"
    )
    lines += ["", "| runs waiting | RSS MB | Private_Dirty MB |", "|---|---|---|"]
    lines += [f"| {s['waiting']} | {cell(s['rss_mb'])} | {cell(s['private_dirty_mb'])} |" for s in waiting["steps"]]
    return lines


_WAITING_ROWS = (
    ("base_mb", "base: ready, one throwaway run done, MB"),
    ("waiting_mb", "all runs waiting for a human (start connections closed, settled), MB"),
    ("peak_mb", "peak while they started and ran to the question, MB"),
    ("per_waiting_run_kb", "(waiting − base) ÷ runs waiting, KB"),
    ("marginal_kb_per_waiting_run", "marginal cost per waiting run (least squares over n={n} bursts), KB"),
)


def _statuses(statuses: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(statuses.items())) or "none"


def runs_markdown(report: dict[str, Any], images: dict[str, str]) -> str:
    lines = opening(f"Agent runs: {report['profile']}", report)
    lines.append(
        f"- **Runs:** agent `{report['agent']}`, answer delay {report['answer_delay_s']} s, "
        f"run timeout {report['run_timeout_s']} s, client open-files limit {cell(report.get('fd_limit'))}"
    )
    lines += ["", "## Concurrent runs", "", _POINT_COLUMNS, "|" + "---|" * 16]
    lines += [_point_line(r) for r in report["points"]]
    lines += _phase_lines(report["points"])
    lines += _cpu_lines(report.get("repeats") or [report["points"]])
    lines += _waiting_lines(report.get("waiting"))
    lines += _campaign_lines(report)
    if report.get("notes"):
        lines += ["", "## Notes from the run", ""] + [f"- {note}" for note in report["notes"]]
    if images:
        lines += ["", "## Plot", ""] + [f"![{name}]({file})" for name, file in images.items()]
    lines.append(_NOTES.replace("{steps}", report["steps_counted_as"]))
    return "\n".join(lines) + "\n"


def plot_durations(points: list[dict[str, Any]], path: Path) -> Path:
    """Run duration p50/p95/p99 (and start-call p50/p99) against N, log-scale N."""
    import matplotlib

    matplotlib.use("Agg")  # no display needed (as agentos_bench.report.plots does)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for percentile, style in (("p50", "-"), ("p95", "--"), ("p99", ":")):
        _line(ax, points, "duration_ms", percentile, style=style, marker="o", color="C0", label=f"run {percentile}")
    for percentile, style in (("p50", "-"), ("p99", ":")):
        _line(ax, points, "start_ms", percentile, style=style, marker="s", color="C1", label=f"start call {percentile}")
    xs = sorted({p["runs"] for p in points})
    ax.set_xscale("log")
    ax.set_xticks(xs, [str(x) for x in xs])
    ax.set_ylim(bottom=0)
    ax.set_xlabel("concurrent runs (N)")
    ax.set_ylabel("milliseconds")
    ax.set_title("Agent run duration (start call → terminal event) and start-call latency")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, handlelength=4)
    fig.text(0.01, 0.005, "points with too few runs are left out: p95 needs >= 20, p99 >= 100", fontsize=7)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _line(ax: Any, points: list[dict[str, Any]], metric: str, percentile: str, style: str, **kw: Any) -> None:
    """One percentile of `metric` against N, leaving out the points where it is None (too few samples)."""
    drawn = [(p["runs"], p[metric][percentile]) for p in points if p[metric].get(percentile) is not None]
    if drawn:
        ax.plot(*zip(*drawn, strict=True), style, **kw)


def write_runs_report(report: dict[str, Any], out_dir: Path, stem: str) -> list[Path]:
    """Write `<stem>.json`, `<stem>.md` and `<stem>-duration.png`; return the paths written.

    An existing report is never overwritten: the stem gets `-2`, `-3`, ... (`output.claim_stem`).

    Raises:
        OSError: `out_dir` cannot be created or written.
    """
    stem = claim_stem(out_dir, stem)
    images: dict[str, Path] = {}
    if any(p["duration_ms"]["p50"] is not None for p in report["points"]):
        try:
            images["run duration percentiles"] = plot_durations(report["points"], out_dir / f"{stem}-duration.png")
        except ImportError:  # matplotlib is the bench extra: the numbers are written without the picture
            report = {**report, "notes": [*report.get("notes", []), PLOTS_SKIPPED]}
    json_path, md_path = out_dir / f"{stem}.json", out_dir / f"{stem}.md"
    write_json(json_path, report)
    md_path.write_text(runs_markdown(report, {name: path.name for name, path in images.items()}))
    return [json_path, md_path, *images.values()]
