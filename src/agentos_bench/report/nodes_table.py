"""The sweep report's lines about the server nodes and the provider limit.

A sweep started with `--nodes N` runs N server processes per profile and spreads the sessions
over them (`agentos_bench.load.nodes`); the header says how. Every server row the bench started
records `kernel.concurrency_limit` and the mock's peak of concurrent streams, and this table
shows the overshoot: max(0, peak − limit), over all nodes together. It can only be above 0 where
the point offers more streams than the limit (c > limit) or the nodes each apply the limit on
their own; at c <= limit a 0 proves nothing about the limit, and the table says so.
Beside it, CPU per turn of the nodes (summed) and of the PostgreSQL and Redis processes where they
run on this machine (`services_cpu_ms_per_turn`, "–" for a profile with neither on loopback):
with the PostgreSQL store part of a turn's cost is spent in the database, not in a node.
Reports written before nodes were recorded have neither line nor table.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def nodes_header(report: dict[str, Any]) -> list[str]:
    cluster = report.get("cluster")
    return [f"- **Nodes:** {cluster['text']}"] if cluster else []


def provider_limit_table(rows: Sequence[dict[str, Any]]) -> list[str]:
    limited = [r for r in rows if r.get("provider_limit") is not None]
    if not limited:
        return []
    lines = ["", "### Nodes, shared services and the provider limit (all nodes together)", ""]
    lines += [
        "| profile | c | nodes | spread | CPU ms/turn: nodes | + PostgreSQL, Redis (this machine) "
        "| kernel.concurrency_limit | mock peak streams | overshoot | what it shows |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in limited:
        cells = [
            row.get("profile") or "–",
            row["concurrency"],
            row.get("nodes", 1),
            row.get("spread") or "–",
            _fmt(row.get("server_cpu_ms_per_turn")),
            _fmt(row.get("services_cpu_ms_per_turn")),
            row["provider_limit"],
            _fmt(row.get("mock_max_concurrent")),
            _fmt(row.get("provider_overshoot")),
            _meaning(row),
        ]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return lines


def _meaning(row: dict[str, Any]) -> str:
    overshoot = row.get("provider_overshoot")
    if overshoot is None:
        return "no mock stats"
    if overshoot > 0:
        return "over the limit"
    if row["concurrency"] <= row["provider_limit"]:
        return "c <= limit: cannot overshoot"
    return "held"


def _fmt(value: Any) -> str:
    return "–" if value is None else str(value)
