"""Each new wire end to end: a real server whose only model (`[models.m]`) is served by a
provider of kind `anthropic` or `openai-responses` pointing at the mock, over real HTTP. A chat
turn streams the mock's text back; an agent run with tools walks the `tools` script (two
commands, a question, the answer) through the wire's tool calls and tool results; the OpenAI
front door (chat completions and the Responses API) answers from the other wire. The router,
kernel, runs and journal are the real ones: only the wire differs from the other tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from pathlib import Path

import openai
import pytest

from agentos.client import AsyncClient
from agentos.config import settings_from_dict
from agentos.config.provider import ProviderKind
from agentos.mock.server import MockServer
from agentos.testing import RunningServer
from tests.api.helpers import start_app
from tests.providers.wire_helpers import MOCK_API_KEY

MockFactory = Callable[..., Awaitable[MockServer]]
pytestmark = pytest.mark.parametrize("kind", ["anthropic", "openai-responses"])


@pytest.fixture
async def upstream(mock_factory: MockFactory) -> MockServer:
    return await mock_factory(scenario="tools", tokens=3)


@pytest.fixture
async def wired(tmp_path: Path, upstream: MockServer, kind: ProviderKind) -> AsyncIterator[RunningServer]:
    settings = settings_from_dict(
        {
            "data_dir": str(tmp_path / "data"),
            "providers": {"x": {"kind": kind, "url": upstream.url, "api_key": MOCK_API_KEY, "max_retries": 0}},
            "models": {"m": {"targets": [{"provider": "x", "model": "upstream-model"}]}},
            "agents": {"ops": {"tools": ["run_command", "ask_human"], "model": "m"}},
        }
    )
    server = await start_app(settings)
    yield server
    await server.close()


async def test_a_chat_turn_streams_through_the_wire(wired: RunningServer, upstream: MockServer) -> None:
    async with AsyncClient(wired.url) as client:
        session = await client.create_session()
        tokens = []
        async with aclosing(client.stream_turn(session.session_id, "hello there")) as events:
            async for event in events:
                if event.name == "token":
                    tokens.append(event.data["delta"])
                last = event
        assert last.name == "turn.completed", last.data
        assert "".join(tokens) == "tok tok tok "
        turn = await client.send_turn(session.session_id, "again")
    assert turn.status == "completed" and turn.output == "tok tok tok "
    assert turn.usage is not None and turn.usage["completion_tokens"] == 3
    assert upstream.stats.completed == 2  # both answers came over the wire


async def test_an_agent_run_with_tools_goes_through_the_wire(
    wired: RunningServer, upstream: MockServer, tmp_path: Path
) -> None:
    async with AsyncClient(wired.url) as client:
        run_id = (await client.start_run("ops", "tidy up")).run_id
        asked = None
        async with aclosing(client.run_events(run_id)) as events:
            async for event in events:
                if event.name == "human.requested":
                    asked = event
                    break
        assert asked is not None and asked.data["question"] == "Proceed with the final answer?"
        await client.answer(run_id, asked.data["operation_id"], "yes")
        async with aclosing(client.run_events(run_id)) as events:
            names = [event.name async for event in events]
        run = await client.get_run(run_id)
    assert names[-1] == "run.completed" and run.status == "completed"
    assert upstream.stats.completed == 4  # run_command, run_command, ask_human, the answer
    assert (tmp_path / "data" / "workspaces" / run_id / "effects.log").read_text() == "step-1\nstep-2\n"


async def test_the_openai_front_door_answers_through_the_wire(wired: RunningServer, upstream: MockServer) -> None:
    """A client of the server's OpenAI door (chat completions, then the Responses API) asks for
    model `m`; the answer comes over the other wire and back in OpenAI's shapes."""
    async with openai.AsyncOpenAI(base_url=f"{wired.url}/v1", api_key="unused-on-loopback") as client:
        stream = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True, stream_options={"include_usage": True}
        )
        chunks = [chunk async for chunk in stream]
        response = await client.responses.create(model="m", input="hi")
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "tok tok tok "
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 3
    assert response.status == "completed" and response.output_text == "tok tok tok "
    assert upstream.stats.completed == 2
