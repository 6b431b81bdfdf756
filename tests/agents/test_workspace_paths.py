"""Issue 13, defect 1, through the built services: with a relative data dir (the README's
`./data`), an agent's command writes in its own workspace. The paths are resolved once, when
the services are built, so a later change of directory does not move them either."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentos.config import Settings
from agentos.providers.base import ChatRequest, Completion
from agentos.services import open_services
from tests.agents.fakes import ScriptedProvider, answer, call
from tests.agents.test_service import wait_status


def write_then_report(request: ChatRequest) -> Completion:
    last = request.messages[-1]
    if last["role"] == "tool":
        return answer(str(last["content"]))  # the run's result: the command's result, as the model saw it
    return call("run_command", {"command": ["sh", "-c", "echo x > f; cat f"]})


async def test_a_command_writes_in_its_workspace_with_a_relative_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    settings = Settings(data_dir="data", jsonl_dir="events", agents={"a": {"tools": ["run_command"]}})
    services = await open_services(settings, provider=ScriptedProvider(write_then_report))
    try:
        assert (services.settings.data_dir, services.settings.jsonl_dir) == (
            str(tmp_path / "data"),
            str(tmp_path / "events"),
        )
        monkeypatch.chdir(tmp_path.parent)  # after start-up: must change nothing
        run_id = await services.runs.start_run("default", "a", "write a file")
        info = await wait_status(services.runs, run_id, "completed")
        result = json.loads(str(info["result"]))
        assert (result["exit_code"], result["stdout"], result["stderr"]) == (0, "x\n", "")
        assert (tmp_path / "data" / "workspaces" / run_id / "f").read_text() == "x\n"
    finally:
        await services.close(1.0)
