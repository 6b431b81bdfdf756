"""What a run waiting for a human costs on the Python heap, counted object by object.

The runs bench (`agentos bench runs`) measures the server process from outside (RSS and
Private_Dirty), which also counts what a burst leaves behind: SQLite's page cache, idle
keep-alive connections to the provider, allocator arenas. This script counts only what the
waiting runs themselves keep: it starts a real `RunService` (real journal on disk, real kernel
and driver) with an in-process provider whose first reply asks a human, parks N runs on that
question, and takes `tracemalloc` snapshots before and after.

    .venv/bin/python bench/scripts/waiting_heap.py --runs 1000
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import platform
import subprocess
import tempfile
import tracemalloc
from collections.abc import AsyncGenerator
from contextlib import aclosing
from pathlib import Path

from agentos.agents.service import RunService
from agentos.config import Settings
from agentos.providers.base import ChatRequest, Completion, StreamItem, ToolCall, Usage

_ASK = Completion(
    text="",
    finish_reason="tool_calls",
    usage=Usage(prompt_tokens=10, completion_tokens=5),
    tool_calls=(ToolCall(call_id="call_0", name="ask_human", arguments='{"question": "Proceed?"}'),),
)


class AskingProvider:
    """Every reply asks the human one question (and keeps nothing of the request)."""

    async def stream(self, request: ChatRequest) -> AsyncGenerator[StreamItem, None]:
        yield _ASK

    async def aclose(self) -> None:
        return None


async def park(service: RunService, n: int) -> None:
    async def one() -> None:
        run_id = await service.start_run("ops", "a question for a human, please")
        async with aclosing(service.events(run_id)) as events:  # unsubscribes on leaving
            async for event in events:
                if event.type == "human.requested":
                    return

    await asyncio.gather(*(one() for _ in range(n)))


async def measure(runs: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as data:
        settings = Settings(agents={"ops": {"tools": ["ask_human"]}})
        service = RunService(AskingProvider(), Path(data), settings)
        await service.start()
        await park(service, 50)  # warm every code path and cache first
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.take_snapshot()
        await park(service, runs)
        for _ in range(3):  # let finished tasks and closed streams go
            await asyncio.sleep(0)
        gc.collect()
        after = tracemalloc.take_snapshot()
        stats = after.compare_to(before, "filename")
        grown = sum(s.size_diff for s in stats)
        top = [(s.traceback[0].filename.split("/src/")[-1], s.size_diff) for s in stats[:8]]
        waiting = service.statistics().waiting_runs
        await service.close(0)
    return {"runs": runs, "waiting": waiting, "bytes_per_waiting_run": round(grown / runs), "top_files": top}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    args = parser.parse_args()
    result = asyncio.run(measure(args.runs))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    result |= {"python": platform.python_version(), "git_commit": commit}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
