"""The report of a load run: JSON (the data) and Markdown (for people), plus a PNG timeline.

Sections in the order the questions are asked: what ran (offered vs recorded first: a gap makes
the report unusable, said in a banner), the sustain phase, the recover phase, the other phases,
CPU, and the verdict last (a verdict on top invites reading only the verdict).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentos_bench.arrival.scenario import RECOVER, SUSTAIN
from agentos_bench.report.output import claim_stem, write_json

_UNUSABLE = (
    "> **UNUSABLE REPORT: offered {offered} requests, recorded {recorded}.** Every offered request must "
    "leave a sample; with a gap, every error rate below is over a smaller denominator than the load. "
    "No verdict is given."
)


def load_markdown(report: dict[str, Any], images: dict[str, str]) -> str:
    ran = report["what_ran"]
    lines = [f"# Open-arrival load ({report['created_utc'][:10]})", "", *_header(report), ""]
    if not report["usable"]:
        lines += [_UNUSABLE.format(offered=ran["offered"], recorded=ran["recorded"]), ""]
    lines += ["## What ran", "", *_what_ran(ran), ""]
    for name in (SUSTAIN, RECOVER):
        if name in report["phases"]:
            lines += [f"## The {name} phase", "", *_phase(report["phases"][name]), ""]
    others = [name for name in report["phases"] if name not in (SUSTAIN, RECOVER)]
    for name in others:
        lines += [f"## The {name} phase", "", *_phase(report["phases"][name]), ""]
    if report.get("recovery"):
        lines += ["## After the burst", "", *_recovery(report["recovery"]), ""]
    lines += ["## CPU", "", *_cpu(report["cpu"], deployment="deployment" in report), ""]
    if "deployment" in report:
        lines += ["## The deployment's figures", "", *_deployment(report["deployment"]["by_phase"]), ""]
    lines += [f"![{name}]({path})" for name, path in images.items()]
    lines += ["", "## Verdict (judged on the sustain phase, each load on its own)", "", *_verdict(report), ""]
    return "\n".join(lines)


def _header(report: dict[str, Any]) -> list[str]:
    machine = report["machine"]
    versions = ", ".join(f"{k} {v}" for k, v in report["versions"].items())
    mock = report["mock"]
    provider = (
        "the deployment's own (the bench did not start it)"
        if mock is None
        else f"TTFT {mock['ttft_ms']} ms, {mock['tps']} tokens/s, {mock['tokens']} tokens, "
        f"scenario {mock['scenario']}, error rate {mock['error_rate']}, hang rate {mock['hang_rate']}"
    )
    return [
        f"- **Date (UTC):** {report['created_utc']}",
        f"- **Machine:** {machine['cpu']}, {machine['cores']} cores, {machine['ram_gib']} GiB RAM, {machine['os']}",
        f"- **Versions:** {versions}",
        f"- **Topology:** {report['topology']}",
        f"- **Mock:** {provider}",
        f"- **Scenario:** {report['scenario_text']}",
        f"- **Command:** `{report['command']}`",
        f"- **Load average (1 min) before / after:** {report['load_average']['before_1m']} / "
        f"{report['load_average']['after_1m']}",
    ]


def _what_ran(ran: dict[str, Any]) -> list[str]:
    match = "match" if ran["offered"] == ran["recorded"] else "**DO NOT MATCH**"
    lines = [
        f"- Offered **{ran['offered']}**, recorded **{ran['recorded']}** ({match}); abandoned at the end: "
        f"{ran['abandoned']}",
        f"- Late dispatches (more than 10 ms behind the schedule): **{ran['late_dispatches']}**; the worst lag "
        f"{ran['max_lag_ms']} ms, p99 {_f(ran['lag_p99_ms'])} ms",
        f"- Connection limit {ran['connection_limit']}; peak in flight {ran['peak_in_flight']}; dispatched while "
        f"at the limit (waited for a socket: the run was partly closed then): {ran['dispatched_at_limit']}",
        "",
        "| load | offered | recorded |",
        "|---|---|---|",
    ]
    lines += [f"| `{kind}` | {c['offered']} | {c['recorded']} |" for kind, c in ran["by_load"].items()]
    return lines


def _phase(phase: dict[str, Any]) -> list[str]:
    lines = [
        f"{phase['seconds']} s at {phase['rate']:g}/s from {phase['start_s']} s. Throughput: "
        f"**{_f(phase['completed_in_window_per_s'])}/s completed** in the window, "
        f"**{_f(phase['offered_per_s'])}/s offered** in it.",
        "",
        "| load | offered | ok | failed (by kind) | latency p50 / p95 / p99 ms (n) | first token p50 / p95 / p99 ms |",
        "|---|---|---|---|---|---|",
    ]
    for kind, s in phase["loads"].items():
        failures = ", ".join(f"{name} {count}" for name, count in s["failures"].items()) or "–"
        first = _pcts(s["first_token_ms"]) if "first_token_ms" in s else ""
        lines.append(
            f"| `{kind}` | {s['offered']} | {s['ok']} | {s['failed']}: {failures} | "
            f"{_pcts(s['latency_ms'])} | {first} |"
        )
    lines += [
        "",
        "Latency is from the time each request was due (not sent), over successful requests only; "
        "percentiles are nearest rank (p95 needs 20 samples, p99 100).",
    ]
    return lines


def _recovery(r: dict[str, Any]) -> list[str]:
    verdict = {True: "**recovered**", False: "**did not recover**", None: "not measured"}[r["recovered"]]
    lines = [
        f"Errors: sustain {_pct(r['sustain_error_rate'])}, `{r['peak_phase']}` {_pct(r['peak_error_rate'])}; "
        f"the recover phase by thirds below. {verdict} (its last third fails no more than max(2 x sustain, 1%)).",
        "",
        "| third of recover | offered | errors | `api_read` latency p50 / p95 / p99 ms (n) |",
        "|---|---|---|---|",
    ]
    for i, third in enumerate(r["recover_thirds"], 1):
        lines.append(
            f"| {i} | {third['offered']} | {_pct(third['error_rate'])} | {_pcts(third['api_read_latency_ms'])} |"
        )
    return lines


def _deployment(by_phase: dict[str, Any]) -> list[str]:
    lines = [
        "| phase | node | peak RSS MB | peak turns in flight | pool: peak in use / waiting / timeouts | scrapes |",
        "|---|---|---|---|---|---|",
    ]
    for phase, figures in by_phase.items():
        for node, n in figures["nodes"].items():
            pool = f"{_f(n.get('peak_pool_in_use'))} / {_f(n.get('peak_pool_waiting'))} / {_f(n.get('pool_timeouts'))}"
            lines.append(
                f"| {phase} | {node} | {_f(n.get('peak_rss_mb'))} | {_f(n.get('peak_in_flight_turns'))} | "
                f"{pool} | {n['scrapes']} ({n['scrape_failures']} failed) |"
            )
    databases = [(phase, f["database_peak"]) for phase, f in by_phase.items() if f["database_peak"]]
    if databases:
        lines += [
            "",
            "| phase | database: peak connections / active / idle in transaction / waiting on a lock | "
            "max_connections |",
            "|---|---|---|",
        ]
        for phase, d in databases:
            lines.append(
                f"| {phase} | {d['connections']} / {d['active']} / {d['idle_in_transaction']} / "
                f"{d['waiting_on_locks']} | {d['max_connections']} |"
            )
    lines += [
        "",
        "From each node's GET /metrics once a second (a pool figure is `–` on SQLite) and, with "
        "`--database-url`, from `pg_stat_activity` (every client of that database, not only these nodes); "
        "timeouts: waits for a pool connection past "
        "`store.postgres_acquire_timeout_s` in the phase.",
    ]
    return lines


def _pct(rate: float | None) -> str:
    return "–" if rate is None else f"{rate * 100:.2f}%"


def _cpu(cpu: dict[str, Any], *, deployment: bool = False) -> list[str]:
    groups = list(cpu["peak_cores"])
    lines = ["| phase | " + " | ".join(groups) + " |", "|---|" + "---|" * len(groups)]
    for phase, values in cpu["cores_by_phase"].items():
        lines.append(f"| {phase} (mean cores) | " + " | ".join(_f(values[g]) for g in groups) + " |")
    lines.append("| peak over 1 s | " + " | ".join(_f(cpu["peak_cores"][g]) for g in groups) + " |")
    if deployment:
        lines += [
            "",
            "Cores = the difference of cumulative CPU time over the interval, divided by its length: "
            "each node's `process_cpu_seconds_total` (its GET /metrics), this process's from /proc.",
        ]
        return lines
    lines += [
        "",
        "Cores = the difference of cumulative CPU time (/proc) over the interval, divided by its length. "
        "server: the server process; sandboxes: its descendants (the fork server and the sandboxed "
        "commands); mock: the mock provider; generator: this bench process.",
    ]
    return lines


def _verdict(report: dict[str, Any]) -> list[str]:
    if report["verdict"] is None:
        return ["No verdict: the report is unusable (offered and recorded do not match)."]
    lines = ["| load | verdict | why |", "|---|---|---|"]
    for kind, v in report["verdict"].items():
        lines.append(f"| `{kind}` | **{v['status']}** | {'; '.join(v['reasons'])} |")
    return lines


def _pcts(p: dict[str, Any]) -> str:
    return f"{_f(p['p50'])} / {_f(p['p95'])} / {_f(p['p99'])} (n={p['n']})"


def _f(value: Any) -> str:
    return "–" if value is None else f"{value:g}" if isinstance(value, float | int) else str(value)


def write_load_report(report: dict[str, Any], out_dir: Path, stem: str) -> list[Path]:
    """`<stem>.json`, `<stem>.md`, and `<stem>-timeline.png` when matplotlib is installed (the
    `bench` extra); without it the report says the plot was skipped and how to get it."""
    stem = claim_stem(out_dir, stem)
    json_path, md_path = out_dir / f"{stem}.json", out_dir / f"{stem}.md"
    write_json(json_path, report)
    written, images = [json_path, md_path], {}
    try:
        from agentos_bench.arrival.plot import plot_timeline
    except ImportError:
        report["plots_skipped"] = "matplotlib is not installed: pip install 'agentos[bench]' for the plot"
    else:
        png = plot_timeline(report, out_dir / f"{stem}-timeline.png")
        images["latency over time"] = png.name
        written.append(png)
    text = load_markdown(report, images)
    if "plots_skipped" in report:
        text += f"\nPlot skipped: {report['plots_skipped']}.\n"
    md_path.write_text(text)
    return written
