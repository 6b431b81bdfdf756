"""The faults report: JSON (the data) and Markdown, the verdict last."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentos_bench.report.document import head_lines
from agentos_bench.report.output import write_json_and_markdown


def faults_markdown(report: dict[str, Any]) -> str:
    lines = [
        f"# Faults: crash storm, provider faults, overload ({report['created_utc'][:10]})",
        "",
        *head_lines(report),
        "",
    ]
    if storm := report.get("storm"):
        lines += ["## Crash storm", "", _table(storm), ""]
    if provider := report.get("provider"):
        lines += ["## Provider faults", "", _table(provider), ""]
    if over := report.get("overload"):
        lines += ["## Overload", "", _table(over), ""]
    lines += ["## Verdict", "", "| target | met | value |", "|---|---|---|"]
    for target, v in report["verdict"].items():
        lines.append(f"| {target} | **{'yes' if v['met'] else 'NO'}** | {v['value']} |")
    return "\n".join(lines) + "\n"


def _table(values: dict[str, Any]) -> str:
    rows = ["| quantity | value |", "|---|---|"]
    rows += [f"| {key.replace('_', ' ')} | {value} |" for key, value in values.items()]
    return "\n".join(rows)


def write_faults_report(report: dict[str, Any], out_dir: Path, stem: str) -> list[Path]:
    return write_json_and_markdown(report, out_dir, stem, faults_markdown)
