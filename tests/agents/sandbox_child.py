"""The real server, started where the OS lacks a sandbox part: reports what it says about it.

    python -m tests.agents.sandbox_child DATA_DIR ALLOW_WEAKER(0|1)

Starts the services and the HTTP app as `agentos serve` does (its log to stderr), asks
`/readyz`, runs an agent whose model calls `run_command` once, and prints one JSON line:
`{"readyz": {...}, "tool_result": {...}}` (what the model was given).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys

import aiohttp
from aiohttp import web

from agentos.api.app import create_app
from agentos.config import settings_from_dict
from agentos.providers.base import ChatRequest, Completion
from agentos.services import open_services
from tests.agents.fakes import ScriptedProvider, answer, call
from tests.agents.test_service import wait_status


def model(request: ChatRequest) -> Completion:
    last = request.messages[-1]
    if last["role"] == "tool":
        return answer(str(last["content"]))
    return call("run_command", {"command": ["sh", "-c", "echo ran"]})


async def main(data_dir: str, allow_weaker: bool) -> None:
    settings = settings_from_dict({"data_dir": data_dir, "sandbox": {"allow_weaker": allow_weaker},
                                   "agents": {"ops": {"tools": ["run_command"]}}})  # fmt: skip
    services = await open_services(settings, provider=ScriptedProvider(model))
    runner = web.AppRunner(create_app(services), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        url = f"http://127.0.0.1:{runner.addresses[0][1]}/readyz"
        async with aiohttp.ClientSession() as http, http.get(url) as r:
            readyz = {"status_code": r.status, **(await r.json())}
        run_id = await services.runs.start_run("default", "ops", "go")
        info = await wait_status(services.runs, run_id, "completed")
        print(json.dumps({"readyz": readyz, "tool_result": json.loads(str(info["result"]))}), flush=True)
    finally:
        await runner.cleanup()
        await services.close(1.0)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    asyncio.run(main(sys.argv[1], sys.argv[2] == "1"))
