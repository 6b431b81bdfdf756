"""The fairness report as markdown: the verdict first, then every row, then how it was made."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentos_bench.report.machine import result_stem, utc_now
from agentos_bench.report.output import write_json_and_markdown


def fairness_markdown(report: dict[str, Any]) -> str:
    plan, machine = report["plan"], report["machine"]
    lines = [
        f"# Fairness: tenant B's latency while tenant A floods ({report['created_utc']})",
        "",
        f"B runs {plan['users']} closed-loop users alone, then beside A with {plan['users'] * plan['ratio']}"
        f" ({plan['ratio']}x); the provider limit (`kernel.concurrency_limit` = {plan['concurrency_limit']})"
        f" binds. Target: B's TTFT p95 with A at most {report['target_ratio']:.2f}x B's alone.",
        "",
        "| variant | B TTFT p95 alone (ms) | B TTFT p95 with A (ms) | ratio | target met |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    for s in report["summary"]:
        met = "yes" if s["meets_target"] else "no"
        lines.append(
            f"| {s['variant']} | {s['b_ttft_p95_alone_ms']} | {s['b_ttft_p95_with_a_ms']} | {s['ratio']} | {met} |"
        )
    lines += [
        "",
        "## Every row",
        "",
        "| variant | phase | tenant | users | turns/s | TTFT p50 | TTFT p95 | TTFT p99 | turn p95 | failures |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in report["rows"]:
        t, turn = r["ttft_ms"], r["turn_ms"]
        lines.append(
            f"| {r['variant']} | {r['phase']} | {r['tenant']} | {r['concurrency']} | {r['turns_per_s']} |"
            f" {t['p50']} | {t['p95']} | {t.get('p99')} | {turn['p95']} | {r['failures_total']} |"
        )
    lines += [
        "",
        "## How",
        "",
        f"- Machine: {machine['cores']} cores, {machine['cpu']}, {machine['ram_gib']} GiB, {machine['os']}",
        f"- Versions: {report['versions']}",
        f"- Command: `{report['command']}`",
        f"- Profile: `{plan['profile']}` (`agentos_bench/profiles`); mock: {report['mock']}",
        f"- Window: warm-up {plan['warmup_s']} s, measured {plan['duration_s']} s per point",
        f"- Topology: {report['topology']}",
    ]
    lines += [f"- Note: {note}" for note in report["notes"]]
    return "\n".join(lines) + "\n"


def write_fairness(report: dict[str, Any], out_dir: Path, name: str | None = None) -> list[Path]:
    """Write `<stem>.json` and `<stem>.md` (a new stem each run, never overwriting); return them."""
    stem = result_stem("fairness", f"b{report['plan']['users']}", report["machine"], utc_now(), name)
    return write_json_and_markdown(report, out_dir, stem, fairness_markdown)
