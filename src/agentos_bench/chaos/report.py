"""The cluster chaos report: JSON (the data) and Markdown, one section per fault, verdicts first."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentos_bench.report.output import write_json_and_markdown


def chaos_markdown(report: dict[str, Any]) -> str:
    machine, plan = report["machine"], report["plan"]
    lines = [
        f"# Faults on a cluster: the chaos campaign ({report['created_utc'][:10]})",
        "",
        f"- **Date (UTC):** {report['created_utc']}",
        f"- **Machine:** {machine['cpu']}, {machine['cores']} cores, {machine['ram_gib']} GiB RAM, {machine['os']}",
        f"- **Versions:** {', '.join(f'{k} {v}' for k, v in report['versions'].items())}",
        f"- **Topology:** {report['topology']}",
        f"- **Command:** `{report['command']}`",
        f"- **Plan:** {plan['nodes']} nodes, {plan['users']} users, {plan['runs']} runs, provider limit "
        f"{plan['provider_limit']}, mock TTFT {plan['ttft_ms']:g} ms, run lease {plan['run_lease_s']:g} s, "
        f"permit lease {plan['permit_lease_s']:g} s, faults {', '.join(plan['faults'])}",
        "",
    ]
    for fault, reason in report.get("skipped", {}).items():
        lines.append(f"- **{fault}: skipped** ({reason})")
    for fault, figures in report.get("faults", {}).items():
        lines += [f"## {fault}", "", *_verdicts(report["verdict"].get(fault, {})), "", _table(figures), ""]
    for phase in ("warm_up", "drain"):
        if report.get(phase):
            lines += [f"## {phase.replace('_', '-')}", "", _table(report[phase]), ""]
    if report.get("notes"):
        lines += ["## Notes", "", *(f"- {note}" for note in report["notes"]), ""]
    return "\n".join(lines) + "\n"


def _verdicts(verdicts: dict[str, dict[str, Any]]) -> list[str]:
    rows = ["| verdict | met | value |", "|---|---|---|"]
    return rows + [f"| {t} | **{'yes' if v['met'] else 'NO'}** | {_cell(v['value'])} |" for t, v in verdicts.items()]


def _table(values: dict[str, Any]) -> str:
    rows = ["| quantity | value |", "|---|---|"]
    flat = {k: v for k, v in values.items() if k != "clients"} | values.get("clients", {})
    return "\n".join(rows + [f"| {k.replace('_', ' ')} | {_cell(v)} |" for k, v in flat.items()])


def _cell(value: Any) -> str:
    return (
        json.dumps(value, separators=(", ", ": ")).replace("|", "/") if isinstance(value, dict | list) else str(value)
    )


def write_chaos_report(report: dict[str, Any], out_dir: Path, stem: str) -> list[Path]:
    return write_json_and_markdown(report, out_dir, stem, chaos_markdown)
