"""The fallback report: JSON (the data) and Markdown: the verdict first, then the arithmetic
behind it, the phases of both runs, the breaker, the targets and the mocks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentos_bench.fallback.findings import p95_difference
from agentos_bench.report.document import head_lines
from agentos_bench.report.output import write_json_and_markdown
from agentos_bench.report.stats import cell, table


def fallback_markdown(report: dict[str, Any]) -> str:
    plan, fault = report["plan"], report["fault"]
    mock = plan["mock"]
    lines = [
        f"# Fallback: the primary target failing {plan['fault_for_s']:g} s under {plan['users']} users "
        f"({report['created_utc'][:10]})",
        "",
        *head_lines(report),
        f"- **Plan:** {plan['users']} closed-loop users for {plan['seconds']:g} s (+{plan['warmup_s']:g} s warm-up); "
        f"the primary answers every request 500 from {plan['fault_at_s']:g} s to "
        f"{plan['fault_at_s'] + plan['fault_for_s']:g} s; breaker: {plan['breaker_failures']} failures, "
        f"{plan['breaker_cooldown_s']:g} s cool-down, {plan['breaker_probes']} probe(s); profile `{plan['profile']}`; "
        f"control run first: {'yes' if plan['control'] else 'no'}",
        f"- **Mocks (both):** ttft_ms={mock['ttft_ms']:g}, tps={mock['tps']:g}, tokens={mock['tokens']}",
        f"- **Load average (1/5/15 min):** {_avg(report['loadavg_start'])} at the start, "
        f"{_avg(report['loadavg_end'])} at the end (everything on the machine)",
        *(f"- **Note:** {note}" for note in plan["notes"]),
        "",
        "## Verdict",
        "",
        "| target | met | value |",
        "|---|---|---|",
        *(f"| {t} | **{'yes' if v['met'] else 'NO'}** | {cell(v['value'])} |" for t, v in report["verdict"].items()),
        "",
        "## The arithmetic",
        "",
        *_arithmetic(fault, plan),
        "",
        "## Phases of the fault run",
        "",
        *_phases(fault),
        "",
    ]
    if control := report.get("control"):
        lines += ["## Phases of the control run (no fault, same sitting)", "", *_phases(control), ""]
    lines += ["## The primary's breaker (fault run)", "", *_breaker(fault["breaker"]), ""]
    for name, run in (("fault run", fault), ("control run", control)):
        if run:
            lines += [f"## Targets on the server's /metrics ({name})", "", *_targets(run), "", *_mocks(run), ""]
    return "\n".join(lines) + "\n"


def _avg(values: list[float]) -> str:
    return "/".join(f"{v:g}" for v in values)


def _pcts(ttft: dict[str, Any]) -> str:
    return f"{' / '.join(cell(ttft.get(p)) for p in ('p50', 'p95', 'p99'))} (n={ttft.get('n', 0)})"


def _arithmetic(fault: dict[str, Any], plan: dict[str, Any]) -> list[str]:
    phases, breaker, mock = fault["phases"], fault["breaker"], plan["mock"]
    turn_s = mock["ttft_ms"] / 1000 + mock["tokens"] / mock["tps"]
    one_attempt = p95_difference(phases, "opening", percentile="p50")
    open_s = phases.get("open", {}).get("to_s", 0) - phases.get("open", {}).get("from_s", 0)
    probes = int(open_s // plan["breaker_cooldown_s"]) if open_s > 0 else None
    before = phases["before"]["ttft_ms"].get("p95")
    open_ = phases.get("open", {}).get("ttft_ms", {}).get("p95")
    lines = [
        f"- TTFT p95 added = p95 while the breaker is open ({cell(open_)} ms) - p95 before the fault "
        f"({cell(before)} ms) = **{cell(fault['ttft_p95_added_ms'])} ms** (client-side, every completed turn "
        "sent in the phase)"
    ]
    if against := fault.get("against_control"):
        lines += [
            f"- The control's own difference over the same seconds (no fault): "
            f"{cell(against['control_ttft_p95_difference_ms'])} ms: the noise of this sitting",
            f"- Open phase against the control's: TTFT p95 x{cell(against['open_ttft_p95_over_control'])}, "
            f"turns/s x{cell(against['open_turns_per_s_over_control'])}",
        ]
    lines += [
        f"- Breaker open for good {cell(breaker.get('opened_after_s'))} s after the switch was sent (every scrape "
        f"from there to the fault's end showed it open; the scrape before, sent at "
        f"{cell(breaker.get('opened_after_s_at_least'))} s, did not); first seen open after "
        f"{cell(breaker.get('first_open_after_s'))} s, closed again {cell(breaker.get('closed_again_before_held'))} "
        "times in between (a call sent before the fault that completes after it closes the breaker and resets its "
        "run of failures: `Breakers.success`); such calls end up to one mock turn after the switch "
        f"({mock['ttft_ms']:g} ms + {mock['tokens']} tokens at {mock['tps']:g}/s = {turn_s:g} s)",
        f"- /metrics read every {breaker['poll_ms']:g} ms, answers {cell(breaker['poll_gap_ms']['p50'])} ms apart "
        f"(p50; max {cell(breaker['poll_gap_ms']['max'])} ms): the timing's granularity",
        f"- Calls that reached the failing primary after the breaker opened for good: "
        f"{cell(breaker.get('calls_while_open'))} ({cell(breaker.get('failures_while_open'))} failures): the half-open "
        f"probes (one per cool-down: about {cell(probes)}) and calls let through before it held whose 500 came "
        "after; each such turn failed over to the secondary after one failed attempt (delayed by one 500); "
        "what one failed attempt costs a turn: the opening phase's TTFT p50 (turns then tried the primary first, "
        f"but while the breaker flickered open) minus the p50 before: {cell(one_attempt)} ms",
        f"- Failed turns: {fault['failed_turns']['failed']} of {fault['failed_turns']['turns']} (every turn sent, "
        "warm-up and the last turns after the window included)",
    ]
    return lines


def _phases(run: dict[str, Any]) -> list[str]:
    rows = [
        "| phase | seconds | turns sent | completed | failed | TTFT p50 / p95 / p99 ms | completed/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, p in run["phases"].items():
        failed = f"{p['failed']} {p['failures']}" if p["failed"] else "0"
        rows.append(
            f"| {name} | {p['from_s']:g}–{p['to_s']:g} | {p['turns']} | {p['completed']} | {failed} | "
            f"{_pcts(p['ttft_ms'])} | {cell(p['turns_per_s'])} |"
        )
    server = run.get("server") or {}
    rows += [
        "",
        f"Server CPU {cell(server.get('server_cpu_cores'))} cores, peak RSS "
        f"{cell(server.get('server_rss_mb_peak'))} MB; load generator {cell(run.get('loadgen_cpu_cores'))} "
        f"cores; mocks' CPU s {run.get('mock_cpu_s')} (over the window).",
    ]
    return rows


def _breaker(breaker: dict[str, Any]) -> list[str]:
    keys = [k for k in breaker if k not in ("state_changes", "poll_gap_ms")]
    rows = ["| quantity | value |", "|---|---|", *(f"| {k.replace('_', ' ')} | {cell(breaker[k])} |" for k in keys)]
    changes = ", ".join(f"{t:g} s: {int(s)}" for t, s in breaker.get("state_changes", []))
    return [
        *rows,
        "",
        f"State changes seen (seconds from the window's start: 0 closed, 1 open, 2 half-open): {changes}",
    ]


def _targets(run: dict[str, Any]) -> list[str]:
    head = ("target", "requests", "fallbacks", "failures by reason", "mean TTFT on the server ms")
    keys = ("requests", "fallbacks", "failures", "ttft_mean_ms")
    return table(
        head,
        [(target, *(t[k] or 0 if k == "failures" else t[k] for k in keys)) for target, t in run["targets"].items()],
    )


def _mocks(run: dict[str, Any]) -> list[str]:
    head = ("mock", "requests", "completed", "errors injected", "aborted", "peak concurrent")
    keys = ("requests", "completed", "errors_injected", "aborted", "max_concurrent")
    return table(head, [(name, *(m[k] for k in keys)) for name, m in run["mock_calls"].items()])


def write_fallback_report(report: dict[str, Any], out_dir: Path, stem: str) -> list[Path]:
    return write_json_and_markdown(report, out_dir, stem, fallback_markdown)
