"""`agentos bench faults`: the three parts, each against a server and mock of its own (processes
bound to 127.0.0.1, stopped by their pids), and the targets judged.

Targets (issue #11): 0 lost and 0 duplicated over the kills; every turn stream with exactly one
terminal event and 0 5xx under provider faults; 429 p99 < 5 ms; goodput >= 90% of capacity
during overload; recovery <= 5 s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentos.mock.server import MockSettings
from agentos_bench.common.mock_process import start_mock_process
from agentos_bench.common.processes import ServerPlan, start_server_process, stop_child
from agentos_bench.faults.parts import PARTS
from agentos_bench.faults.provider import (
    PROVIDER_CONFIG,
    OverloadPlan,
    ProviderFaultPlan,
    overload,
    overload_config,
    provider_faults,
)
from agentos_bench.faults.storm import StormPlan, crash_storm

_OVERLOAD_MOCK = MockSettings(ttft_ms=1000.0, tps=100.0, tokens=10)  # a 1.1 s turn


@dataclass(frozen=True, kw_only=True)
class FaultsPlan:
    parts: tuple[str, ...] = PARTS
    storm: StormPlan = field(default_factory=StormPlan)
    provider: ProviderFaultPlan = field(default_factory=ProviderFaultPlan)
    overload: OverloadPlan = field(default_factory=OverloadPlan)
    command: str = ""


async def run_faults(plan: FaultsPlan, work_dir: Path) -> dict[str, Any]:
    result: dict[str, Any] = {}
    if "storm" in plan.parts:
        result["storm"] = await _with_processes(
            work_dir / "storm",
            MockSettings(ttft_ms=50.0, tps=200.0, tokens=10, scenario="tools"),
            "",
            lambda server_plan, url, log_dir: crash_storm(plan.storm, server_plan, log_dir),
            start_server=False,
        )
    if "provider" in plan.parts:
        p = plan.provider
        mock = MockSettings(
            ttft_ms=50.0,
            tps=200.0,
            tokens=10,
            error_rate=p.error_rate,
            hang_rate=p.hang_rate,
            fail_every=p.fail_every,
            retry_after_s=0.2,
        )
        result["provider"] = await _with_processes(
            work_dir / "provider", mock, PROVIDER_CONFIG, lambda _, url, __: provider_faults(p, url)
        )
    if "overload" in plan.parts:
        o = plan.overload
        turn_s = (_OVERLOAD_MOCK.ttft_ms / 1000) + _OVERLOAD_MOCK.tokens / _OVERLOAD_MOCK.tps
        result["overload"] = await _with_processes(
            work_dir / "overload",
            _OVERLOAD_MOCK,
            overload_config(o.limit),
            lambda _, url, log_dir: overload(o, url, turn_s, log_dir),
        )
    result["verdict"] = verdict(result)
    return result


async def _with_processes(
    work_dir: Path, mock_settings: MockSettings, config: str, part: Any, *, start_server: bool = True
) -> dict[str, Any]:
    profile = _prepare(work_dir, config)
    mock = await start_mock_process(mock_settings, work_dir)
    try:
        server_plan = ServerPlan(profile_path=profile, provider_url=mock.url, data_dir=work_dir / "data")
        if not start_server:  # the part starts (and kills, and restarts) the server itself
            found: dict[str, Any] = await part(server_plan, "", work_dir)
            return found
        server = await start_server_process(server_plan, work_dir)
        try:
            found = await part(server_plan, server.url, work_dir)
            return found
        finally:
            await stop_child(server.process)
    finally:
        await stop_child(mock.process)


def _prepare(work_dir: Path, config: str) -> Path:
    """The part's directory and its server config file (small, local: written before the loop work)."""
    work_dir.mkdir(parents=True, exist_ok=True)
    profile = work_dir / "server.toml"
    profile.write_text(config or "# agentos bench faults: the server's defaults\n")
    return profile


def verdict(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each target: met or not, with the number it was judged on."""
    found: dict[str, dict[str, Any]] = {}
    if storm := result.get("storm"):
        bad = storm["lost_turns"] + storm["duplicated_turns"] + storm["lost_steps"] + storm["duplicated_effects"]
        found["0 lost, 0 duplicated over the kills"] = {"met": bad == 0, "value": bad}
        found["store integrity after the storm"] = {
            "met": all(v == "ok" for v in storm["integrity"].values()),
            "value": storm["integrity"],
        }
    if provider := result.get("provider"):
        one = provider["streams_with_one_terminal_event"] == provider["streams"] > 0
        found["every stream ends with exactly one terminal event"] = {"met": one, "value": provider["streams"]}
        found["0 responses 5xx under provider faults"] = {
            "met": provider["responses_5xx"] == 0,
            "value": provider["responses_5xx"],
        }
    if over := result.get("overload"):
        p99 = over["refusal_ms"]["p99"]
        found["429 p99 < 5 ms"] = {"met": p99 is not None and p99 < 5.0, "value": p99}
        found["goodput >= 90% of capacity"] = {"met": over["goodput_share"] >= 0.9, "value": over["goodput_share"]}
        found["every accepted turn completes"] = {
            "met": over["accepted"] == over["completed"],
            "value": f"{over['completed']} of {over['accepted']}",
        }
        recovery = over["recovery_s"]
        found["recovery <= 5 s"] = {"met": recovery is not None and recovery <= 5.0, "value": recovery}
    return found
