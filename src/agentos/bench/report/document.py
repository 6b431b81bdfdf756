"""Reports: one JSON (the data, for `bench compare`) and one Markdown (for people), plus PNG plots.

Every report starts with the same header: machine, versions, topology, profile(s), exact command.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

SCHEMA_VERSION = 1


def _header(report: dict[str, Any]) -> list[str]:
    machine, versions = report["machine"], report["versions"]
    version_text = ", ".join(f"{k} {v}" for k, v in versions.items())
    return [
        f"- **Date (UTC):** {report['created_utc']}",
        f"- **Machine:** {machine['cpu']}, {machine['cores']} cores, {machine['ram_gib']} GiB RAM, {machine['os']}",
        f"- **Versions:** {version_text}",
        f"- **Topology:** {report['topology']}",
        f"- **Profile(s):** {', '.join(report.get('profiles') or []) or 'none (direct only)'}",
        f"- **Mock:** {_mock_text(report['mock'])}",
        f"- **Command:** `{report['command']}`",
    ]


def _mock_text(mock: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in mock.items())


def _fmt(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _pcts(values: dict[str, Any]) -> str:
    return " / ".join(_fmt(values.get(p)) for p in ("p50", "p95", "p99"))


_SWEEP_COLUMNS = (
    "| c | turns/s | TTFT ms p50/p95/p99 | turn ms p50/p95/p99 | failures | server CPU cores | CPU ms/turn "
    "| RSS MB peak/end | Private_Dirty MB peak/end | mock max conc. | mock CPU | loadgen CPU |"
)


def _sweep_line(row: dict[str, Any]) -> str:
    failures = ", ".join(f"{k}: {v}" for k, v in row["failures"].items()) or "0"
    if row.get("setup_failures"):
        failures += f" (+{row['setup_failures']} sessions not created)"
    rss = f"{_fmt(row.get('server_rss_mb_peak'))} / {_fmt(row.get('server_rss_mb_end'))}"
    dirty = f"{_fmt(row.get('server_private_dirty_mb_peak'))} / {_fmt(row.get('server_private_dirty_mb_end'))}"
    cells = [
        row["concurrency"],
        row["turns_per_s"],
        _pcts(row["ttft_ms"]),
        _pcts(row["turn_ms"]),
        failures,
        _fmt(row.get("server_cpu_cores")),
        _fmt(row.get("server_cpu_ms_per_turn")),
        rss,
        dirty,
        _fmt(row.get("mock_max_concurrent")),
        _fmt(row.get("mock_cpu_cores")),
        _fmt(row.get("loadgen_cpu_cores")),
    ]
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _group_title(row: dict[str, Any]) -> str:
    if row["target"] == "direct":
        return "direct: the mock alone (zero-overhead row)"
    return f"server, profile `{row.get('profile')}`"


def _sweep_tables(rows: Sequence[dict[str, Any]]) -> list[str]:
    lines: list[str] = []
    titles: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        titles.setdefault(_group_title(row), []).append(row)
    for title, group in titles.items():
        lines += ["", f"### {title}", "", _SWEEP_COLUMNS, "|" + "---|" * 12]
        lines += [_sweep_line(r) for r in sorted(group, key=lambda r: r["concurrency"])]
    return lines


def overhead_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Server p50 minus direct p50 at the same concurrency: what the server adds to a turn."""
    direct = {r["concurrency"]: r for r in rows if r["target"] == "direct"}
    out = []
    for row in rows:
        base = direct.get(row["concurrency"])
        if row["target"] != "server" or base is None:
            continue
        out.append(
            {
                "profile": row.get("profile"),
                "concurrency": row["concurrency"],
                "ttft_p50_ms": _minus(row["ttft_ms"]["p50"], base["ttft_ms"]["p50"]),
                "turn_p50_ms": _minus(row["turn_ms"]["p50"], base["turn_ms"]["p50"]),
                "turns_per_s_ratio": round(row["turns_per_s"] / base["turns_per_s"], 3)
                if base["turns_per_s"]
                else None,
            }
        )
    return out


def _minus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(a - b, 1)


def _overhead_table(rows: Sequence[dict[str, Any]]) -> list[str]:
    overhead = overhead_rows(rows)
    if not overhead:
        return []
    lines = ["", "### Server overhead against the direct row (same concurrency)", ""]
    lines += ["| profile | c | +TTFT p50 ms | +turn p50 ms | turns/s ÷ direct |", "|---|---|---|---|---|"]
    for o in overhead:
        cells = [o["profile"], o["concurrency"], o["ttft_p50_ms"], o["turn_p50_ms"], o["turns_per_s_ratio"]]
        lines.append("| " + " | ".join(_fmt(c) for c in cells) + " |")
    return lines


_SWEEP_NOTES = """
## What the columns mean

- **turns/s**: successful turns that ended inside the measured window, divided by its length.
- **TTFT**: from sending the turn request to the first content event (`token` from the server,
  a content chunk from the mock). **turn**: from sending to the terminal event. Both are
  nearest-rank percentiles over successful turns only; failures are counted apart, by kind.
- **failures**: `429` (admission), `5xx`, `stream_break` (the stream ended without a terminal
  event), `timeout`, `turn_failed` / `cancelled` (terminal events other than `turn.completed`).
- **server CPU cores**: delta of the server tree's cumulative CPU time over the window ÷ window
  length (1.0 = one core busy); **CPU ms/turn** is that CPU time ÷ the successful turns.
  **RSS / Private_Dirty**: `/proc/<pid>/smaps_rollup` summed over the server's process tree,
  sampled every 0.5 s (peak) and at the window's end.
- **mock max conc.**: the mock's `max_concurrent` during the point (proof of the provider limit).
- **mock CPU / loadgen CPU**: the same CPU delta for the mock and for the load generator, which
  share the machine with the server.
"""


def sweep_markdown(report: dict[str, Any], images: dict[str, str]) -> str:
    lines = [f"# Sweep: {', '.join(report['profiles']) or 'direct only'} ({report['created_utc'][:10]})", ""]
    lines += _header(report)
    window = report["window"]
    lines.append(f"- **Window:** {window['warmup_s']} s warm-up, then {window['duration_s']} s measured per point")
    lines += ["", "## Results"]
    lines += _sweep_tables(report["rows"])
    lines += _overhead_table(report["rows"])
    if report.get("notes"):
        lines += ["", "## Notes from the run", ""] + [f"- {note}" for note in report["notes"]]
    lines += ["", "## Plots", ""] + [f"![{name}]({file})" for name, file in images.items()]
    lines.append(_SWEEP_NOTES)
    return "\n".join(lines) + "\n"


def memory_markdown(report: dict[str, Any], images: dict[str, str]) -> str:
    summary = report["summary"]
    lines = [f"# Memory staircase: {report['profile']} ({report['created_utc'][:10]})", ""]
    lines += _header(report)
    lines += ["", "## Summary", "", "| quantity | RSS | Private_Dirty |", "|---|---|---|"]
    for key, label in _MEMORY_ROWS:
        lines.append(f"| {label} | {_fmt(summary[key]['rss'])} | {_fmt(summary[key]['private_dirty'])} |")
    lines += ["", _memory_text(report), "", "## Plot", ""]
    lines += [f"![{name}]({file})" for name, file in images.items()]
    lines += ["", "## Steps (sessions → MB)", "", "| sessions | RSS MB | Private_Dirty MB |", "|---|---|---|"]
    for step in report["steps"]:
        lines.append(f"| {step['sessions']} | {step['rss_mb']} | {step['private_dirty_mb']} |")
    return "\n".join(lines) + "\n"


_MEMORY_ROWS = (
    ("start_mb", "at start (ready, no session), MB"),
    ("base_mb", "fixed base (after the throwaway session), MB"),
    ("end_mb", "after the last session, MB"),
    ("marginal_kb_per_session", "marginal cost per session (least squares), KB"),
    ("after_delete_mb", "after deleting half the sessions, MB"),
    ("after_ttl_mb", "after the rest expired (TTL), MB"),
    ("returned_mb", "returned at the end (end − last release sample), MB"),
)


def _memory_text(report: dict[str, Any]) -> str:
    failures = report.get("failed_turns", 0)
    release = report.get("release", {})
    gauges = "; ".join(
        f"{name.replace('_', ' ')}: active sessions {_fmt(mark.get('agentos_active_sessions'))}, "
        f"evicted total {_fmt(mark.get('agentos_sessions_evicted_total'))}"
        for name, mark in release.items()
    )
    return (
        f"{report['sessions']} sessions, one completed turn each ({failures} failed), sampled "
        f"{report['settle_s']} s after each step. TTL {report['session_ttl_s']} s. "
        f"Server counters at the top: active sessions {_fmt(report.get('top', {}).get('agentos_active_sessions'))}; "
        f"{gauges or 'not read'}. RAM planning: base + marginal × concurrent sessions."
    )


def write_report(report: dict[str, Any], out_dir: Path, stem: str) -> list[Path]:
    """Write `<stem>.json`, `<stem>.md` and the plots; return the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    images = _write_plots(report, out_dir, stem)
    json_path, md_path = out_dir / f"{stem}.json", out_dir / f"{stem}.md"
    json_path.write_bytes(msgspec.json.format(msgspec.json.encode(report), indent=2) + b"\n")
    render = sweep_markdown if report["kind"] == "sweep" else memory_markdown
    md_path.write_text(render(report, {name: path.name for name, path in images.items()}))
    return [json_path, md_path, *images.values()]


def _write_plots(report: dict[str, Any], out_dir: Path, stem: str) -> dict[str, Path]:
    from agentos.bench.report import plots  # matplotlib only where plots are drawn (`compare` needs none)

    if report["kind"] == "memory":
        return {"memory staircase": plots.plot_staircase(report, out_dir / f"{stem}-staircase.png")}
    rows = [r for r in report["rows"] if r["turns_ok"]]
    if not rows:
        return {}
    return {
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
