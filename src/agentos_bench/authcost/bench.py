"""The auth-cost bench's method (see the package docstring): provision, then alternate rounds.

Every process is a child of this one, on 127.0.0.1, stopped by its pid; every wait has a deadline.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentos_bench.authcost.client import Job, Outcome, as_dict, job_json, outcome_from_line
from agentos_bench.authcost.plan import ADMIN_TOKEN, MODES, AuthCostPlan, config_toml
from agentos_bench.authcost.provision import Target, provision_keys, provision_open
from agentos_bench.common.processes import (
    BenchSetupError,
    Child,
    free_port,
    read_line,
    start_job_child,
    stop_child,
    wait_ready,
)
from agentos_bench.common.procfs import sample_tree

_READY_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Mode:
    name: str  # "open" (A) or "keys" (B)
    config: Path
    data_dir: Path
    log_dir: Path

    @property
    def env(self) -> dict[str, str]:
        """This process's environment without AGENTOS_* settings, plus the admin token in B."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTOS_")}
        return env | {"AGENTOS_API_TOKEN": ADMIN_TOKEN} if self.name == "keys" else env


def prepare_modes(work_dir: Path) -> list[Mode]:
    modes = []
    for name in MODES:
        root = work_dir / name
        (root / "data").mkdir(parents=True, exist_ok=True)
        config = root / "agentos.toml"
        config.write_text(config_toml(name))
        modes.append(Mode(name, config, root / "data", root))
    return modes


async def start_server(mode: Mode, label: str) -> Child:
    """`agentos serve` for `mode` on a free loopback port, ready (GET /readyz 200).

    Raises:
        BenchSetupError: it exited or was not ready in time.
    """
    port = free_port()
    argv = [sys.executable, "-m", "agentos", "serve", "--config", str(mode.config), "--host", "127.0.0.1"]
    argv += ["--port", str(port), "--data-dir", str(mode.data_dir)]
    log_path = mode.log_dir / f"server-{label}.log"
    with log_path.open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            *argv, stdout=log, stderr=log, stdin=asyncio.subprocess.DEVNULL, env=mode.env
        )
    child = Child(name=f"server-{mode.name}", process=process, url=f"http://127.0.0.1:{port}", log_path=log_path)
    if not await wait_ready(child, _READY_TIMEOUT_S):
        await stop_child(process)
        raise BenchSetupError(f"server ({mode.name}) not ready in {_READY_TIMEOUT_S}s (see {str(log_path)!r})")
    return child


async def provision(mode: Mode, plan: AuthCostPlan) -> list[Target]:
    """Make the mode's sessions (and in B its tenants and keys) on a server started for that."""
    server = await start_server(mode, "setup")
    try:
        if mode.name == "keys":
            return await provision_keys(server.url, ADMIN_TOKEN, plan.tenants, plan.keys_per_tenant)
        return await provision_open(server.url, plan.targets)
    finally:
        await stop_child(server.process)


async def measure_round(mode: Mode, targets: list[Target], plan: AuthCostPlan, label: str) -> dict[str, Any]:
    """One round: a fresh server, a client process, the server tree's CPU across `plan.requests`."""
    server = await start_server(mode, label)
    try:
        job = Job(server.url, targets, plan.requests, plan.concurrency, plan.warmup_requests, plan.round_timeout_s)
        job_path = mode.log_dir / f"job-{label}.json"
        job_path.write_bytes(job_json(job))
        client = await start_job_child("agentos_bench.authcost.client", job_path, mode.log_dir / f"client-{label}.log")
        try:
            await read_line(client, plan.round_timeout_s, "auth-cost client", "'ready'")
            before = sample_tree(server.pid, memory=False)
            assert client.stdin is not None
            client.stdin.write(b"go\n")
            await client.stdin.drain()
            outcome = outcome_from_line(
                await read_line(client, plan.round_timeout_s + 10, "auth-cost client", "outcome")
            )
            await asyncio.sleep(plan.settle_s)
            after = sample_tree(server.pid, memory=False)
        finally:
            await stop_child(client)
    finally:
        await stop_child(server.process)
    return _round(mode.name, label, outcome, after.cpu_s - before.cpu_s)


def _round(mode: str, label: str, outcome: Outcome, server_cpu_s: float) -> dict[str, Any]:
    done = max(outcome.requests, 1)
    return {
        "mode": mode,
        "round": label,
        "server_cpu_s": round(server_cpu_s, 3),
        "server_cpu_ms_per_request": server_cpu_s * 1000 / done,
        "requests_per_s": outcome.requests / outcome.elapsed_s if outcome.elapsed_s else 0.0,
        "client_cpu_ms_per_request": outcome.client_cpu_s * 1000 / done,
        **as_dict(outcome),
    }


async def run_rounds(plan: AuthCostPlan, work_dir: Path) -> list[dict[str, Any]]:
    """Provision both modes, then `plan.rounds` rounds of each, alternating A, B, A, B, ..."""
    modes = prepare_modes(work_dir)
    targets = {m.name: await provision(m, plan) for m in modes}
    rounds = []
    for r in range(plan.rounds):
        for mode in modes:
            rounds.append(await measure_round(mode, targets[mode.name], plan, f"{mode.name}-{r + 1}"))
    return rounds


def summarize(rounds: list[dict[str, Any]], plan: AuthCostPlan) -> dict[str, Any]:
    """Medians per mode and B - A; `valid` only if every measured request of every round got 200
    and, in B, every answer carried the RateLimit headers (so the limiter ran on each)."""
    by_mode: dict[str, dict[str, Any]] = {}
    for mode in MODES:
        mine = [r for r in rounds if r["mode"] == mode]
        by_mode[mode] = {
            "rounds": len(mine),
            "server_cpu_ms_per_request_median": statistics.median(r["server_cpu_ms_per_request"] for r in mine),
            "server_cpu_ms_per_request_all": [round(r["server_cpu_ms_per_request"], 4) for r in mine],
            "requests_per_s_median": statistics.median(r["requests_per_s"] for r in mine),
            "client_cpu_ms_per_request_median": statistics.median(r["client_cpu_ms_per_request"] for r in mine),
        }
    a, b = by_mode["open"], by_mode["keys"]
    added = b["server_cpu_ms_per_request_median"] - a["server_cpu_ms_per_request_median"]
    pairs = [k["server_cpu_ms_per_request"] - o["server_cpu_ms_per_request"] for o, k in _pairs(rounds)]
    valid = all(r["ok"] == plan.requests and not r["timed_out"] for r in rounds) and all(
        r["rate_headers"] == r["requests"] for r in rounds if r["mode"] == "keys"
    )
    return {
        "open": a,
        "keys": b,
        "added_cpu_ms_per_request": added,
        "added_cpu_ms_per_request_paired": [round(d, 4) for d in pairs],
        "added_cpu_ms_per_request_paired_median": statistics.median(pairs) if pairs else None,
        "bar_ms": 0.1,
        "within_bar": added <= 0.1,
        "valid": valid,
    }


def _pairs(rounds: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(A, B) of each round, in the order they ran."""
    opens = [r for r in rounds if r["mode"] == "open"]
    keys = [r for r in rounds if r["mode"] == "keys"]
    return list(zip(opens, keys, strict=False))


def run_auth_cost(plan: AuthCostPlan, work_dir: Path) -> dict[str, Any]:
    """The whole bench: the rounds (on an event loop), then the microbench (none running), the report."""
    from agentos.mock.loop import run_loop
    from agentos_bench.authcost.report import build_report
    from agentos_bench.micro.auth import micro_bench

    rounds = run_loop(run_rounds(plan, work_dir))
    summary = summarize(rounds, plan)
    micro: dict[str, Any] = {}
    if plan.micro_calls:
        sessions_db = work_dir / "keys" / "data" / "sessions.db"
        micro = micro_bench(plan.tenants, plan.keys_per_tenant, plan.micro_calls, sessions_db)
    return build_report(plan, rounds, summary, micro)
