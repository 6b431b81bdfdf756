"""`agentos usage`: the usage ledger's totals from a running server (GET /v1/usage), as a table or JSON.

Like `agentos tenants|keys` it talks to the server (`--url`) with a key read from `--key-file`
or AGENTOS_API_KEY: a tenant's key (scope `sessions:read`) sees its own tenant, an admin key
every tenant's or `--tenant`'s. Exit status as for the admin commands (`agentos.cli.admin`).

    agentos usage --group-by model,day --from 2026-12-01 --to 2026-12-06
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Mapping, Sequence
from pathlib import Path
from typing import Any

from agentos.cli.admin import DEFAULT_URL, KEY_ENV, run_admin
from agentos.client import AdminClient
from agentos.store.ledger import DAY_MS, GROUP_NAMES, day_of

_SUMS = ("calls", "prompt_tokens", "completion_tokens", "cache_read_tokens", "cache_write_tokens", "cost")
_HEADINGS = {"prompt_tokens": "prompt", "completion_tokens": "completion", "cache_read_tokens": "cache_read"}
_HEADINGS |= {"cache_write_tokens": "cache_write"}


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser], environ: Mapping[str, str]) -> None:
    """Add `usage` to the `agentos` parser."""
    parser = commands.add_parser("usage", help="tokens and cost of model calls, from a running server's ledger")
    parser.add_argument("--url", default=DEFAULT_URL, help=f"the server (default {DEFAULT_URL})")
    parser.add_argument("--key-file", type=Path, help=f"a file holding a key (else env {KEY_ENV})")
    parser.add_argument("--group-by", default="", help=f"a comma list of {', '.join(GROUP_NAMES)}; none: one total")
    parser.add_argument("--from", dest="start", help="first UTC day (YYYY-MM-DD) or epoch ms; default: 29 days ago")
    parser.add_argument("--to", dest="end", help="last UTC day counted, or the first epoch ms not; default: today")
    parser.add_argument("--tenant", help="an admin key: only this tenant (default: every tenant)")
    json_help = "print the server's JSON answer (default: a table)"
    parser.add_argument("--json", dest="show", action="store_const", const=None, help=json_help)
    parser.set_defaults(handler=lambda args: run_admin(args, environ), admin=_usage, show=table)


def _usage(admin: AdminClient, args: argparse.Namespace) -> Awaitable[Any]:
    groups = [name for name in args.group_by.split(",") if name]
    return admin.usage(group_by=groups, start=args.start, end=args.end, tenant=args.tenant)


def table(report: Mapping[str, Any]) -> str:
    """The report as aligned columns: the groups, then the sums; a cost without a price is `-`."""
    groups: Sequence[str] = report["group_by"]
    headings = [*groups, *(_HEADINGS.get(name, name) for name in _SUMS), "unpriced"]
    rows = [
        [*(str(t[g]) for g in groups), *(_cell(t[name]) for name in _SUMS), str(t["unpriced_calls"])]
        for t in report["data"]
    ]
    widths = [max(len(row[i]) for row in [headings, *rows]) for i in range(len(headings))]
    lines = [_line(headings, widths, len(groups)), *(_line(row, widths, len(groups)) for row in rows)]
    whose = "every tenant" if report["tenant"] is None else f"tenant {report['tenant']}"
    last_day = day_of(report["to_ms"] - 1)
    span = f"{day_of(report['from_ms'])} to {last_day}" if report["to_ms"] % DAY_MS == 0 else _ms_span(report)
    lines.append(f"{len(rows)} rows; {whose}; {span} (UTC)")
    if report["truncated"]:
        lines.append("truncated: narrow the range or the grouping")
    if any(t["unpriced_calls"] for t in report["data"]):
        lines.append("cost '-': some calls went to a target without a price (counted in tokens only)")
    return "\n".join(lines) + "\n"


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.6f}" if isinstance(value, float) else str(value)


def _line(cells: Sequence[str], widths: Sequence[int], left: int) -> str:
    """Group columns aligned left, numbers right."""
    return "  ".join(c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))


def _ms_span(report: Mapping[str, Any]) -> str:
    return f"[{report['from_ms']}, {report['to_ms']}) ms"
