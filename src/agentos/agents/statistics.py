"""What `RunService.statistics` reports: the kernel's view of runs and the engine's bookkeeping."""

from __future__ import annotations

from dataclasses import dataclass

from agentos.agents.engine import RunEngine
from agentos.kernel import Kernel


@dataclass(frozen=True, slots=True)
class RunServiceStatistics:
    active_runs: int  # runs with a task
    waiting_runs: int  # runs parked on a human (no task)
    handles: int
    pending_deadlines: int
    subscribers: int


def run_statistics(kernel: Kernel, engine: RunEngine) -> RunServiceStatistics:
    counts = kernel.statistics()
    return RunServiceStatistics(
        active_runs=counts.active_runs,
        waiting_runs=counts.waiting_runs,
        handles=len(engine.handles),
        pending_deadlines=counts.human_deadlines_pending,
        subscribers=engine.fanout.count(),
    )
