"""Forks over real HTTP: the real app and SQLite journal, the real provider client against the
bench mock (`tools` scenario), whose request counter proves that a fork replays its copied
steps without a model call. Both journals and delegation: tests/agents/test_forks.py."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agentos.api.keys import SSE_KEEPALIVE_S
from agentos.client import APIError, AsyncClient, Run
from agentos.config import settings_from_dict
from agentos.mock.server import MockServer
from agentos.testing import RunningServer
from tests.api.helpers import assert_documented, expect_error, start_app

AGENTS = {"careful": {"tools": ["run_command", "ask_human"], "approval_required": ["run_command"]}}
# The `careful` run of the mock's `tools` scenario: two approved commands, a question, the answer.
KINDS = ["model", "human", "tool", "model", "human", "tool", "model", "human", "model"]
JSON = {"Content-Type": "application/json"}


@pytest.fixture
async def served(
    tmp_path: Path, mock_factory: Callable[..., Awaitable[MockServer]]
) -> AsyncIterator[tuple[RunningServer, MockServer]]:
    mock = await mock_factory(scenario="tools")
    settings = settings_from_dict(
        {"data_dir": str(tmp_path / "data"), "provider": {"url": mock.url, "retry_budget_s": 2.0}, "agents": AGENTS}
    )
    server = await start_app(settings, lambda app: app.__setitem__(SSE_KEEPALIVE_S, 0.05))
    yield server, mock
    await server.close()


async def finish(client: AsyncClient, run_id: str) -> Run:
    """Follow the run to its end, approving each command and answering each question "yes"."""
    async with aclosing(client.run_events(run_id)) as stream:
        async for event in stream:
            if event.name == "human.requested":
                request = event.human_request()
                if request.kind == "approval":
                    await client.answer(run_id, request.operation_id, approve=True, args_hash=request.args_hash)
                else:
                    await client.answer(run_id, request.operation_id, "yes")
    return await client.get_run(run_id)


async def test_a_fork_at_each_step_calls_the_model_only_after_it(
    served: tuple[RunningServer, MockServer], tmp_path: Path
) -> None:
    server, mock = served
    async with AsyncClient(server.url) as client:
        original = await finish(client, (await client.start_run("careful", "x")).run_id)
        assert original.status == "completed" and original.result
        assert mock.stats.requests == KINDS.count("model")
        for at_seq in range(len(KINDS) + 1):
            before = mock.stats.requests
            ref = await client.fork_run(original.run_id, at_seq)
            assert ref.status == "queued" and ref.forked_from is not None
            assert (ref.forked_from.run_id, ref.forked_from.at_seq) == (original.run_id, at_seq)
            fork = await finish(client, ref.run_id)
            assert (fork.status, fork.result) == ("completed", original.result), at_seq
            assert mock.stats.requests - before == KINDS[at_seq:].count("model"), at_seq
            effects = tmp_path / "data" / "workspaces" / ref.run_id / "effects.log"
            ran = effects.read_text() if effects.exists() else ""
            assert ran == "".join(f"step-{n}\n" for n, seq in ((1, 3), (2, 6)) if seq > at_seq), at_seq
        listed = await client.list_runs(limit=100)
        forks = [run for run in listed.data if run.forked_from is not None]
        assert sorted(run.forked_from.at_seq for run in forks if run.forked_from) == list(range(len(KINDS) + 1))
        assert (await client.get_run(original.run_id)).forked_from is None


async def test_an_edited_answer_over_http(served: tuple[RunningServer, MockServer]) -> None:
    server, _ = served
    async with AsyncClient(server.url) as client:
        original = await finish(client, (await client.start_run("careful", "x")).run_id)
        ref = await client.fork_run(original.run_id, 3, content="edited output")
        async with aiohttp.ClientSession() as http, http.get(f"{server.url}/v1/runs/{ref.run_id}") as response:
            body = await response.json()
        assert body["forked_from"] == {"run_id": original.run_id, "at_seq": 3}
        assert_documented(body, "Run")
        fork = await finish(client, ref.run_id)
        assert fork.status == "completed"


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"at_seq": 10}, 422, "fork_seq_out_of_range"),
        ({"at_seq": 1, "edit": {"content": "x"}}, 422, "fork_edit_not_allowed"),
        ({"at_seq": 2, "edit": {"content": "x"}}, 422, "fork_edit_invalid"),
        ({"at_seq": 0, "edit": {"answer": "x"}}, 422, "fork_edit_not_allowed"),
        ({"at_seq": -1}, 422, None),
        ({"at_seq": 2**63}, 422, None),
        ({"at_seq": "1"}, 422, None),
        ({"at_seq": 1, "edit": {"result": "x"}}, 422, None),
        ({"at_seq": 1, "extra": 1}, 422, None),
        ({}, 422, None),
    ],
)
async def test_hostile_forks_answer_4xx(
    served: tuple[RunningServer, MockServer], body: dict[str, Any], status: int, code: str | None
) -> None:
    server, _ = served
    async with AsyncClient(server.url) as client:
        original = await finish(client, (await client.start_run("careful", "x")).run_id)
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{server.url}/v1/runs/{original.run_id}/fork", json=body) as response:
            await expect_error(response, status, code)
        async with http.post(f"{server.url}/v1/runs/run_nope/fork", json={"at_seq": 0}) as response:
            await expect_error(response, 404, "run_not_found")
    async with AsyncClient(server.url) as client:
        assert all(run.forked_from is None for run in (await client.list_runs()).data)  # nothing started
        with pytest.raises(APIError) as missing:
            await client.fork_run("run_nope", 0)
        assert (missing.value.status, missing.value.code) == (404, "run_not_found")
