"""Reports: one JSON (the data, for `bench compare`) and one Markdown (for people), plus PNG plots.

Every report starts with the same header: machine, versions, topology, profile(s), exact command.
Every percentile cell carries the number of samples behind it, `(n=…)`; a percentile with too few
samples is "–" (the rule is in `agentos_bench.report.stats`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from agentos_bench.report.nodes_table import nodes_header, provider_limit_table
from agentos_bench.report.output import claim_stem, write_json
from agentos_bench.report.overhead import overhead_rows
from agentos_bench.report.peers_table import peers_section
from agentos_bench.report.stats import cell
from agentos_bench.report.tenants_table import tenancy_header, tenants_table

SCHEMA_VERSION = 1
PLOTS_SKIPPED = "plots skipped: matplotlib is not installed (pip install 'agentos[bench]' draws them)"


def _api_header(report: dict[str, Any]) -> list[str]:
    """Which API the server's turns went through (sweeps since `--api`; older reports: native)."""
    lines = []
    if report.get("api") == "openai":
        lines.append("- **Turns via:** `POST /v1/chat/completions` with `X-Session-Id` (the OpenAI front door)")
    if report.get("double_text") == "enqueue":
        lines.append(
            "- **Double text:** each server turn is a pair in one session, the second sent with"
            " `on_busy: enqueue` once the first started; both count in turns/s"
        )
    return lines


def head_lines(report: dict[str, Any]) -> list[str]:
    """Date, machine, versions, topology and command: the lines every report opens with
    (`report_head`'s fields), for the reports that need nothing of a sweep's."""
    machine = report["machine"]
    return [
        f"- **Date (UTC):** {report['created_utc']}",
        f"- **Machine:** {machine['cpu']}, {machine['cores']} cores, {machine['ram_gib']} GiB RAM, {machine['os']}",
        f"- **Versions:** {', '.join(f'{k} {v}' for k, v in report['versions'].items())}",
        f"- **Topology:** {report['topology']}",
        f"- **Command:** `{report['command']}`",
    ]


def opening(title: str, report: dict[str, Any]) -> list[str]:
    """A report's Markdown opening: `# <title> (<its date>)`, then the header every bench report has."""
    return [f"# {title} ({report['created_utc'][:10]})", "", *_header(report)]


def _header(report: dict[str, Any]) -> list[str]:
    machine, versions = report["machine"], report["versions"]
    version_text = ", ".join(f"{k} {v}" for k, v in versions.items())
    return [
        f"- **Date (UTC):** {report['created_utc']}",
        f"- **Machine:** {machine['cpu']}, {machine['cores']} cores, {machine['ram_gib']} GiB RAM, {machine['os']}",
        f"- **Versions:** {version_text}",
        f"- **Topology:** {report['topology']}",
        f"- **Profile(s):** {', '.join(report.get('profiles') or []) or 'none (direct only)'}",
        *tenancy_header(report),
        *nodes_header(report),
        *_api_header(report),
        f"- **Mock:** {_mock_text(report['mock'])}",
        *_loadavg_line(report.get("loadavg")),
        f"- **Command:** `{report['command']}`",
    ]


def _loadavg_line(loadavg: dict[str, list[float]] | None) -> list[str]:
    if not loadavg or "start" not in loadavg or "end" not in loadavg:
        return []  # reports written before it was recorded
    start, end = ("/".join(f"{v:g}" for v in loadavg[k]) for k in ("start", "end"))
    return [f"- **Load average (1/5/15 min):** {start} at the start, {end} at the end (everything on the machine)"]


def _mock_text(mock: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in mock.items())


def _pcts(values: dict[str, Any]) -> str:
    """`p50 / p95 / p99 (n=K)`; reports written before `n` was recorded show no count."""
    text = " / ".join(cell(values.get(p)) for p in ("p50", "p95", "p99"))
    return f"{text} (n={values['n']})" if "n" in values else text


_SWEEP_COLUMNS = (
    "| c | turns/s | TTFT ms p50/p95/p99 (n) | turn ms p50/p95/p99 (n) | failures | server CPU cores | CPU ms/turn "
    "| RSS MB peak/end | Private_Dirty MB peak/end | mock max conc. | mock CPU | loadgen CPU |"
)


def _sweep_line(row: dict[str, Any]) -> str:
    failures = ", ".join(f"{k}: {v}" for k, v in row["failures"].items()) or "0"
    if row.get("setup_failures"):
        failures += f" (+{row['setup_failures']} sessions not created)"
    rss = f"{cell(row.get('server_rss_mb_peak'))} / {cell(row.get('server_rss_mb_end'))}"
    dirty = f"{cell(row.get('server_private_dirty_mb_peak'))} / {cell(row.get('server_private_dirty_mb_end'))}"
    cells = [
        row["concurrency"],
        row["turns_per_s"],
        _pcts(row["ttft_ms"]),
        _pcts(row["turn_ms"]),
        failures,
        cell(row.get("server_cpu_cores")),
        cell(row.get("server_cpu_ms_per_turn")),
        rss,
        dirty,
        cell(row.get("mock_max_concurrent")),
        cell(row.get("mock_cpu_cores")),
        cell(row.get("loadgen_cpu_cores")),
    ]
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _group_title(row: dict[str, Any]) -> str:
    if row["target"] == "direct":
        return "direct: the mock alone (zero-overhead row)"
    if row["target"] != "server":  # a peer (agentos_bench.peers)
        return f"peer `{row['target']}` (another agent server, same mock and load)"
    nodes = f", {row['nodes']} nodes" if row.get("nodes", 1) > 1 else ""
    return f"server, profile `{row.get('profile')}`{nodes}"


def _sweep_tables(rows: Sequence[dict[str, Any]]) -> list[str]:
    lines: list[str] = []
    titles: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        titles.setdefault(_group_title(row), []).append(row)
    for title, group in titles.items():
        lines += ["", f"### {title}", "", _SWEEP_COLUMNS, "|" + "---|" * 12]
        lines += [_sweep_line(r) for r in sorted(group, key=lambda r: r["concurrency"])]
    return lines


def _overhead_table(rows: Sequence[dict[str, Any]]) -> list[str]:
    overhead = overhead_rows(rows)
    if not overhead:
        return []
    lines = ["", "### Server overhead against the direct row (server − direct, same concurrency)", ""]
    lines += [
        "| profile | c | n server / direct | +TTFT ms p50/p95/p99 | +turn ms p50/p95/p99 | turns/s ÷ direct |",
        "|---|---|---|---|---|---|",
    ]
    for o in overhead:
        counts = f"{cell(o['n_server'])} / {cell(o['n_direct'])}"
        cells = [cell(o["profile"]), o["concurrency"], counts, _pcts(o["ttft_ms"]), _pcts(o["turn_ms"])]
        lines.append("| " + " | ".join(str(c) for c in [*cells, cell(o["turns_per_s_ratio"])]) + " |")
    return lines


_SWEEP_NOTES = """
## What the columns mean

- **turns/s**: successful turns that ended inside the measured window, divided by its length.
- **TTFT**: from sending the turn request to the first content event (`token` from the server,
  a content chunk from the mock). **turn**: from sending to the terminal event. Both are
  nearest-rank percentiles over successful turns only; failures are counted apart, by kind.
  **(n=…)** is the number of turns behind a cell. p50 needs one, p95 at least 20 and p99 at
  least 100 (so that at least one turn lies above it); with fewer the cell shows "–" rather than
  the maximum under another name.
- **overhead**: server percentile minus direct percentile at the same concurrency (a difference
  of percentiles: the turns are not paired), "–" when either side has too few turns for it;
  throughput as server turns/s ÷ direct turns/s.
- **failures**: `429` (admission), `5xx`, `stream_break` (the stream ended without a terminal
  event), `timeout`, `turn_failed` / `cancelled` (terminal events other than `turn.completed`).
- **server CPU cores**: delta of the server tree's cumulative CPU time over the window ÷ window
  length (1.0 = one core busy); **CPU ms/turn** is that CPU time ÷ the successful turns.
  **RSS / Private_Dirty**: `/proc/<pid>/smaps_rollup` summed over the server's process tree,
  sampled every 0.5 s (peak) and at the window's end.
- **mock max conc.**: the mock's `max_concurrent` during the point (proof of the provider limit);
  **overshoot** is max(0, that peak − `kernel.concurrency_limit`), all nodes together.
- **nodes** (`--nodes N`): server CPU, CPU ms/turn and memory are summed over the N node processes;
  **+ PostgreSQL, Redis**: CPU ms/turn of those services' processes where they run on this machine
  (on a shared machine it includes everyone else's use of them).
- **mock CPU / loadgen CPU**: the same CPU delta for the mock and for the load generator, which
  share the machine with the server.
"""


def sweep_markdown(report: dict[str, Any], images: dict[str, str]) -> str:
    lines = opening(f"Sweep: {', '.join(report['profiles']) or 'direct only'}", report)
    window = report["window"]
    lines.append(f"- **Window:** {window['warmup_s']} s warm-up, then {window['duration_s']} s measured per point")
    lines += ["", "## Results"]
    lines += _sweep_tables(report["rows"])
    lines += _overhead_table(report["rows"])
    lines += tenants_table(report["rows"])
    lines += provider_limit_table(report["rows"])
    lines += peers_section(report.get("peers") or [])
    if report.get("notes"):
        lines += ["", "## Notes from the run", ""] + [f"- {note}" for note in report["notes"]]
    lines += ["", "## Plots", ""] + [f"![{name}]({file})" for name, file in images.items()]
    lines.append(_SWEEP_NOTES)
    return "\n".join(lines) + "\n"


def memory_markdown(report: dict[str, Any], images: dict[str, str]) -> str:
    summary = report["summary"]
    item = report.get("item", "session with one completed turn")
    workload = f" ({report['workload']})" if report.get("workload", "turn") != "turn" else ""
    lines = opening(f"Memory staircase: {report['profile']}{workload}", report)
    if report.get("skipped"):
        return "\n".join([*lines, "", f"**Not measured:** {report['skipped']}", ""])
    columns = [(key, label) for key, label in _MEMORY_COLUMNS if key in summary.get("base_mb", {})]
    lines += ["", "## Summary", "", "| quantity | " + " | ".join(label for _, label in columns) + " |"]
    lines.append("|---|" + "---|" * len(columns))
    climbed = sum(1 for step in report["steps"] if _step_items(step) > 0)  # the points behind the slope
    for key, template in _MEMORY_ROWS:
        if key in summary:
            label = template.replace("{n}", str(climbed)).replace("{item}", item)
            lines.append(f"| {label} | " + " | ".join(cell(summary[key].get(c)) for c, _ in columns) + " |")
    lines += ["", _memory_text(report), "", "## Plot", ""]
    lines += [f"![{name}]({file})" for name, file in images.items()] or [f"- {n}" for n in report.get("notes", [])]
    lines += _memory_steps(report)
    return "\n".join(lines) + "\n"


def _step_items(step: dict[str, Any]) -> int:
    return int(step["items"] if "items" in step else step["sessions"])


def _memory_steps(report: dict[str, Any]) -> list[str]:
    fields = [(f, label) for f, label in _STEP_FIELDS if any(f in step for step in report["steps"])]
    lines = ["", "## Steps (items → MB)", "", "| items | " + " | ".join(label for _, label in fields) + " |"]
    lines.append("|---|" + "---|" * len(fields))
    for step in report["steps"]:
        lines.append(f"| {_step_items(step)} | " + " | ".join(cell(step.get(f)) for f, _ in fields) + " |")
    return lines


_MEMORY_COLUMNS = (
    ("rss", "RSS"),
    ("private_dirty", "Private_Dirty"),
    ("heap", "Python heap (tracemalloc)"),
    ("malloc_used", "C heap in use (mallinfo2)"),
    ("malloc_free", "C heap free, held"),
    ("blocks", "allocated blocks (count; per item: blocks)"),
)
_STEP_FIELDS = (
    ("rss_mb", "RSS MB"),
    ("private_dirty_mb", "Private_Dirty MB"),
    ("heap_mb", "Python heap MB"),
    ("malloc_used_mb", "C heap in use MB"),
    ("malloc_free_mb", "C heap free MB"),
    ("blocks", "blocks"),
    ("trims", "trims"),
)
_MEMORY_ROWS = (
    ("start_mb", "at start (ready, no item), MB"),
    ("base_mb", "fixed base (after the throwaway item), MB"),
    ("end_mb", "after the last item, MB"),
    ("marginal_kb_per_session", "marginal cost per {item} (least squares over n={n} steps), KB"),
    ("after_delete_mb", "after deleting half the sessions, MB"),
    ("after_ttl_mb", "after the rest expired (TTL), MB"),
    ("after_end_mb", "after every run was answered and ended, MB"),
    ("ttl_returned_mb", "**reclaim**: returned by the TTL evictions (after delete − after TTL), MB"),
    ("returned_mb", "returned at the end (end − last release sample), MB"),
)


def _memory_text(report: dict[str, Any]) -> str:
    failures = report.get("failed_turns", 0)
    release = report.get("release", {})
    gauges = "; ".join(
        f"{name.replace('_', ' ')}: active sessions {cell(mark.get('agentos_active_sessions'))}, "
        f"evicted total {cell(mark.get('agentos_sessions_evicted_total'))}, trims {cell(mark.get('trims'))} "
        f"({cell(mark.get('trim_released_mb'))} MB given back, the last in {cell(mark.get('trim_last_ms'))} ms)"
        for name, mark in release.items()
    )
    env = ", ".join(f"{k}={v}" for k, v in report.get("server_env", {}).items()) or "none"
    return (
        f"{report['sessions']} × {report.get('item', 'session with one completed turn')} ({failures} failed), "
        f"{_steps_text(report)}{_input_text(report)}, sampled {report['settle_s']} s after each step. "
        f"TTL {report['session_ttl_s']} s. Server environment added: {env}; "
        f"tracemalloc {'on' if report.get('tracemalloc') else 'off'}. "
        f"Server counters at the top: active sessions {cell(report.get('top', {}).get('agentos_active_sessions'))}; "
        f"{gauges or 'not read'}. RAM planning: base + marginal × concurrent items."
    )


def _steps_text(report: dict[str, Any]) -> str:
    if "points" in report:
        return f"one server per point with {', '.join(map(str, report['points']))} of them"
    return f"{report.get('step', 1)} per step"


def _input_text(report: dict[str, Any]) -> str:
    size = report.get("input_bytes") or 0
    return f", each turn's input {size} bytes" if size else ""


def write_report(report: dict[str, Any], out_dir: Path, stem: str) -> list[Path]:
    """Write `<stem>.json`, `<stem>.md` and the plots; return the paths written.

    An existing report is never overwritten: the stem gets `-2`, `-3`, ... (`output.claim_stem`).

    Raises:
        OSError: `out_dir` cannot be created or written.
    """
    stem = claim_stem(out_dir, stem)
    try:
        images = _write_plots(report, out_dir, stem)
    except ImportError:  # matplotlib is the bench extra: the numbers are written without their pictures
        images, report = {}, {**report, "notes": [*report.get("notes", []), PLOTS_SKIPPED]}
    json_path, md_path = out_dir / f"{stem}.json", out_dir / f"{stem}.md"
    write_json(json_path, report)
    render = sweep_markdown if report["kind"] == "sweep" else memory_markdown
    md_path.write_text(render(report, {name: path.name for name, path in images.items()}))
    return [json_path, md_path, *images.values()]


def _write_plots(report: dict[str, Any], out_dir: Path, stem: str) -> dict[str, Path]:
    from agentos_bench.report import plots  # matplotlib only where plots are drawn (`compare` needs none)

    if report["kind"] == "memory":
        if not report["steps"]:
            return {}  # a workload that was not measured (`skipped`)
        return {"memory staircase": plots.plot_staircase(report, out_dir / f"{stem}-staircase.png")}
    rows = [r for r in report["rows"] if r["turns_ok"]]
    overhead = overhead_rows(rows)
    if overhead:  # the direct row is the baseline: plot what the server adds to it
        return {
            "TTFT overhead": plots.plot_overhead(
                overhead, "ttft_ms", "Time to first token: server overhead", out_dir / f"{stem}-ttft-overhead.png"
            ),
            "turn overhead": plots.plot_overhead(
                overhead, "turn_ms", "Full turn: server overhead", out_dir / f"{stem}-turn-overhead.png"
            ),
            "throughput ratio": plots.plot_throughput_ratio(overhead, out_dir / f"{stem}-throughput-ratio.png"),
        }
    if not rows:
        return {}
    return {  # nothing to subtract: absolute numbers are all there is
        "TTFT percentiles": plots.plot_latency(rows, "ttft_ms", "Time to first token", out_dir / f"{stem}-ttft.png"),
        "turn percentiles": plots.plot_latency(rows, "turn_ms", "Full turn time", out_dir / f"{stem}-turn.png"),
        "throughput": plots.plot_throughput(rows, out_dir / f"{stem}-throughput.png"),
    }


def load_report(path: Path) -> dict[str, Any]:
    """Read a report JSON.

    Raises:
        ValueError: it is not a bench report.
    """
    data = msgspec.json.decode(path.read_bytes())
    if not isinstance(data, dict) or data.get("kind") not in ("sweep", "memory"):
        raise ValueError(f"{str(path)!r} is not a bench report")
    return data
