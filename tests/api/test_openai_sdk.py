"""The official `openai` SDK (sync, async, streamed, the Responses API) against the real server.

Real server on a loopback port, real mock provider over HTTP, real SQLite; the SDK is the client
people point at Agent OS, so what it parses is what works. The sync client blocks: it runs in a
thread, so the server (on this test's loop) keeps serving.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import openai
import pytest
from openai.types.responses import ResponseCompletedEvent

from agentos.config import settings_from_dict
from agentos.mock.server import MockServer
from agentos.testing import RunningServer, start_server

MOCK_TEXT = "tok tok tok tok"  # the mock's answer: 4 tokens of "tok "
AGENTS = {"ops": {"tools": ["run_command"], "command": {"timeout_s": 10}}}


@pytest.fixture
async def server(tmp_path: Path, mock_factory) -> AsyncIterator[RunningServer]:
    mock: MockServer = await mock_factory(scenario="light")
    settings = settings_from_dict(
        {"data_dir": str(tmp_path / "data"), "provider": {"url": mock.url, "retry_budget_s": 2.0}, "agents": AGENTS}
    )
    running = await start_server(settings)
    yield running
    await running.close()


def sdk(server: RunningServer, **options) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="unused-on-loopback", **options)


async def test_models_lists_the_agents_and_the_plain_model(server: RunningServer) -> None:
    async with sdk(server) as client:
        models = [m async for m in client.models.list()]
    assert [(m.id, m.object) for m in models] == [("ops", "model"), ("mock-1", "model")]


async def test_a_completion_of_the_plain_model(server: RunningServer) -> None:
    async with sdk(server) as client:
        raw = await client.chat.completions.with_raw_response.create(
            model="mock-1", messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
        )
        answer = raw.parse()
    assert answer.object == "chat.completion" and answer.model == "mock-1"
    content = answer.choices[0].message.content
    assert content is not None and content.strip() == MOCK_TEXT
    assert answer.choices[0].finish_reason == "stop"
    assert answer.usage is not None and answer.usage.completion_tokens == 4
    assert raw.headers["X-Session-Id"].startswith("ses_")


async def test_the_sync_client(server: RunningServer) -> None:
    def call() -> tuple[str, list[str]]:
        with openai.OpenAI(base_url=f"{server.url}/v1", api_key="k") as client:
            whole = client.chat.completions.create(model="mock-1", messages=[{"role": "user", "content": "hi"}])
            stream = client.chat.completions.create(
                model="mock-1", messages=[{"role": "user", "content": "hi"}], stream=True
            )
            parts = [c.choices[0].delta.content or "" for c in stream if c.choices]
        return whole.choices[0].message.content or "", parts

    whole, parts = await asyncio.to_thread(call)
    assert whole.strip() == MOCK_TEXT
    assert "".join(parts).strip() == MOCK_TEXT and len(parts) >= 5  # the role chunk, then tokens


async def test_a_streamed_completion_with_usage(server: RunningServer) -> None:
    async with sdk(server) as client:
        stream = await client.chat.completions.create(
            model="mock-1",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [c async for c in stream]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert len({c.id for c in chunks}) == 1 and len({c.created for c in chunks}) == 1
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices).strip() == MOCK_TEXT
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 4


async def test_the_stream_helper_accumulates_the_completion(server: RunningServer) -> None:
    async with (
        sdk(server) as client,
        client.chat.completions.stream(model="mock-1", messages=[{"role": "user", "content": "hi"}]) as stream,
    ):
        final = await stream.get_final_completion()
    content = final.choices[0].message.content
    assert content is not None and content.strip() == MOCK_TEXT


async def test_an_agent_runs_its_tools_and_answers(server: RunningServer) -> None:
    async with sdk(server) as client:
        answer = await client.chat.completions.create(model="ops", messages=[{"role": "user", "content": "build"}])
        stream = await client.chat.completions.create(
            model="ops", messages=[{"role": "user", "content": "build"}], stream=True
        )
        streamed = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert answer.choices[0].message.content and answer.choices[0].message.tool_calls is None
    assert streamed.strip() == answer.choices[0].message.content.strip()


async def test_a_session_header_continues_a_session(server: RunningServer, http) -> None:
    async with sdk(server) as client:
        first = await client.chat.completions.with_raw_response.create(
            model="mock-1", messages=[{"role": "user", "content": "one"}]
        )
        session_id = first.headers["X-Session-Id"]
        await client.chat.completions.create(
            model="mock-1",
            messages=[{"role": "user", "content": "two"}],
            extra_headers={"X-Session-Id": session_id},
        )
    async with http.get(f"{server.url}/v1/sessions/{session_id}/messages") as r:
        messages = (await r.json())["data"]
    assert [(m["role"], m["content"]) for m in messages][::2] == [("user", "one"), ("user", "two")]


async def test_a_user_field_of_a_session_ids_form_continues_that_session(server: RunningServer, http) -> None:
    """`user` picks the session when it has a session id's form; any other value picks nothing."""
    async with sdk(server, max_retries=0) as client:
        first = await client.chat.completions.with_raw_response.create(
            model="mock-1", messages=[{"role": "user", "content": "one"}], user="alice@example.com"
        )
        session_id = first.headers["X-Session-Id"]
        second = await client.chat.completions.with_raw_response.create(
            model="mock-1", messages=[{"role": "user", "content": "two"}], user=session_id
        )
        other = await client.chat.completions.with_raw_response.create(
            model="mock-1", messages=[{"role": "user", "content": "three"}], user="alice@example.com"
        )
        with pytest.raises(openai.NotFoundError):  # a session id's form, but no session of the caller
            await client.chat.completions.create(
                model="mock-1", messages=[{"role": "user", "content": "x"}], user="ses_" + "0" * 36
            )
    assert second.headers["X-Session-Id"] == session_id != other.headers["X-Session-Id"]
    async with http.get(f"{server.url}/v1/sessions/{session_id}/messages") as r:
        messages = (await r.json())["data"]
    assert [(m["role"], m["content"]) for m in messages][::2] == [("user", "one"), ("user", "two")]


async def test_errors_are_openai_errors(server: RunningServer) -> None:
    async with sdk(server, max_retries=0) as client:
        with pytest.raises(openai.NotFoundError) as missing:
            await client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(openai.BadRequestError) as bad:
            await client.chat.completions.create(model="mock-1", messages=[])
    assert missing.value.code == "model_not_found" and missing.value.type == "not_found_error"
    assert bad.value.param == "messages" and bad.value.type == "invalid_request_error"


async def test_responses_continue_a_conversation(server: RunningServer) -> None:
    async with sdk(server) as client:
        first = await client.responses.create(model="mock-1", input="one")
        second = await client.responses.create(model="mock-1", input="two", previous_response_id=first.id)
        again = await client.responses.retrieve(second.id)
    assert first.output_text.strip() == MOCK_TEXT and second.output_text.strip() == MOCK_TEXT
    assert first.id != second.id and again.id == second.id and again.status == "completed"
    assert again.output_text.strip() == MOCK_TEXT


async def test_responses_stream_their_events(server: RunningServer) -> None:
    async with sdk(server) as client:
        stream = await client.responses.create(model="mock-1", input="one", stream=True)
        events = [e async for e in stream]
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert "response.output_text.delta" in kinds
    assert [e.sequence_number for e in events] == list(range(len(events)))
    done = events[-1]
    assert isinstance(done, ResponseCompletedEvent)
    assert done.response.output_text.strip() == MOCK_TEXT
