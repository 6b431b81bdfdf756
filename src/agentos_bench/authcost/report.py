"""The auth-cost report: JSON (the data) and Markdown (the header every bench report has, then tables)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

# the header is document.py's, so every report's header reads the same
from agentos_bench.authcost.plan import NEVER_REFUSING_RATE, AuthCostPlan, config_toml
from agentos_bench.report.document import SCHEMA_VERSION, opening
from agentos_bench.report.machine import report_head
from agentos_bench.report.output import write_json_and_markdown

TOPOLOGY = (
    "one machine, loopback only: the server (`agentos serve`, one process, built-in mock, SQLite store; "
    "CPU sampled from /proc), the load client (a separate process, keep-alive connections)"
)
CONFIGURATIONS = {
    "open": "A: open loopback mode: no token, no keys; every request is the open principal (tenant "
    "`default`, no limits)",
    "keys": "B: {tenants} tenants x {keys} keys made through the admin API (AGENTOS_API_TOKEN); every request "
    "presents a key and reads its own tenant's session; `[tenant_limits]` request and key rates of "
    "{rate} per minute (never refusing: the limiter runs and answers RateLimit headers on every request)",
}


def build_report(
    plan: AuthCostPlan, rounds: list[dict[str, Any]], summary: dict[str, Any], micro: dict[str, Any]
) -> dict[str, Any]:
    described = {
        name: text.format(tenants=plan.tenants, keys=plan.keys_per_tenant, rate=NEVER_REFUSING_RATE)
        for name, text in CONFIGURATIONS.items()
    }
    return {
        "schema_version": SCHEMA_VERSION,
        **report_head("auth-cost", TOPOLOGY, plan.command),
        "profiles": ["auth-cost A (open)", "auth-cost B (keys)"],
        "mock": {"built-in": "not called (GET /v1/sessions/{id} asks no model)"},
        "plan": asdict(plan),
        "configurations": described,
        "config_files": {name: config_toml(name) for name in CONFIGURATIONS},
        "route": "GET /v1/sessions/{id}",
        "rounds": rounds,
        "summary": summary,
        "micro": micro,
    }


def _f(value: float | None, digits: int = 4) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _round_lines(rounds: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| round | server CPU s | CPU ms/request | requests/s (client) | client CPU ms/request | 200s | other "
        "| RateLimit headers |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rounds:
        other = {k: v for k, v in r["statuses"].items() if k != "200"}
        rest = ", ".join(f"{k}: {v}" for k, v in other.items()) or "0"
        rest += f", errors: {r['errors']}" if r["errors"] else ""
        lines.append(
            f"| {r['round']} | {r['server_cpu_s']:.2f} | {_f(r['server_cpu_ms_per_request'])} | "
            f"{r['requests_per_s']:.0f} | {_f(r['client_cpu_ms_per_request'])} | {r['ok']} | {rest} | "
            f"{r['rate_headers']} |"
        )
    return lines


def _micro_lines(micro: dict[str, Any]) -> list[str]:
    if not micro:
        return ["(skipped)"]
    names = [
        ("keyed_path_us", "keyed path: auth (key: token compare, parse, lookup, HMAC) + limiter + RateLimit headers"),
        ("open_path_us", "open path: auth (open principal), limiter skipped"),
        ("added_us", "**added: keyed - open**"),
        ("parse_us", "part: key parse (shape, alphabet, CRC32 checksum)"),
        ("hmac_us", "part: HMAC-SHA256 of the secret"),
        ("authenticate_us", "part: `registry.authenticate` (parse + lookup + HMAC + checks)"),
        ("check_request_us", "part: `Limiters.check_request` (two GCRA decisions, RateLimit strings)"),
        ("read_with_tenant_us", "SQLite read `WHERE session_id = ? AND tenant_id = ?` (the route's)"),
        ("read_without_tenant_us", "SQLite read `WHERE session_id = ?`"),
        ("tenant_filter_us", "**tenant filter: the difference**"),
    ]
    lines = ["| what | µs per call |", "|---|---|"]
    lines += [f"| {text} | {micro[key]:.2f} |" for key, text in names if key in micro]
    lines.append("")
    each = max(1, micro["calls"] // micro["repeats"])
    lines.append(f"Best of {micro['repeats']} interleaved repeats of {each} calls; {micro['keys']} keys registered.")
    return lines


def auth_cost_markdown(report: dict[str, Any]) -> str:
    s, plan = report["summary"], report["plan"]
    a, b = s["open"], s["keys"]
    verdict = "within" if s["within_bar"] else "OVER"
    lines = opening("Auth cost: key lookup, tenant filtering, rate limiting", report)
    lines += [
        f"- **Route:** `{report['route']}`, {plan['requests']} measured requests per round after "
        f"{plan['warmup_requests']} warm-up, {plan['concurrency']} keep-alive connections, "
        f"{plan['rounds']} rounds per configuration, alternating A, B, A, B, ... (a fresh server each round)",
    ]
    lines += [f"- **{name}:** {text}" for name, text in report["configurations"].items()]
    lines += ["", "## Result", ""]
    lines += [
        "| | A (open) | B (keys + limits) | B - A |",
        "|---|---|---|---|",
        f"| server CPU ms/request (median) | {_f(a['server_cpu_ms_per_request_median'])} | "
        f"{_f(b['server_cpu_ms_per_request_median'])} | **{_f(s['added_cpu_ms_per_request'])}** |",
        f"| requests/s at the client (median) | {a['requests_per_s_median']:.0f} | "
        f"{b['requests_per_s_median']:.0f} | |",
        f"| client CPU ms/request (median) | {_f(a['client_cpu_ms_per_request_median'])} | "
        f"{_f(b['client_cpu_ms_per_request_median'])} | |",
        "",
        f"B - A per round pair: {', '.join(_f(d) for d in s['added_cpu_ms_per_request_paired'])} ms "
        f"(median {_f(s['added_cpu_ms_per_request_paired_median'])}). "
        f"The bar (issue 8): ≤ {s['bar_ms']} ms of CPU per request: **{verdict}**. "
        f"Every request answered 200 (and in B carried RateLimit headers): **{s['valid']}**.",
        "",
        "## Rounds",
        "",
        *_round_lines(report["rounds"]),
        "",
        "## The added path alone, in process (microbench)",
        "",
        *_micro_lines(report["micro"]),
        "",
    ]
    return "\n".join(lines)


def write_auth_cost_report(report: dict[str, Any], out_dir: Path, stem: str) -> list[Path]:
    return write_json_and_markdown(report, out_dir, stem, auth_cost_markdown)
