"""The sweep report's lines about tenancy: the header line, and how each tenant fared per point.

A sweep run with tenants (`agentos bench sweep --tenants N`) merges every tenant's turns into one
row per point, so its tables compare with the direct row like a single-tenant run's. This table
adds the spread over the tenants of that same point (min / median / max of each tenant's turns/s
and TTFT p95), so one tenant served worse than the others shows instead of averaging away.
Reports written before tenancy was recorded have neither line nor table.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentos_bench.report.stats import cell


def tenancy_header(report: dict[str, Any]) -> list[str]:
    tenancy = report.get("tenancy")
    return [f"- **Tenancy:** {tenancy['text']}"] if tenancy else []


def tenants_table(rows: Sequence[dict[str, Any]]) -> list[str]:
    spread_rows = [r for r in rows if r.get("tenancy")]
    if not spread_rows:
        return []
    lines = ["", "### Per tenant (the spread over the tenants with users, same point)", ""]
    lines += [
        "| profile | c | tenants with users | users per tenant min/max | turns/s per tenant min / median / max "
        "| TTFT p95 ms per tenant min / median / max (tenants with a p95) |",
        "|---|---|---|---|---|---|",
    ]
    for row in spread_rows:
        t = row["tenancy"]
        users = f"{cell(t['users_per_tenant']['min'])} / {cell(t['users_per_tenant']['max'])}"
        cells = [
            row.get("profile") or "–",
            row["concurrency"],
            f"{t['tenants_with_users']} of {t['tenants']}",
            users,
            _three(t["turns_per_s"]),
            f"{_three(t['ttft_p95_ms'])} ({t['ttft_p95_tenants']})",
        ]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return lines


def _three(spread: dict[str, Any]) -> str:
    return " / ".join(cell(spread.get(k)) for k in ("min", "median", "max"))
