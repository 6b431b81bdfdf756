"""The front door's exact bytes, and what it answers to hostile input.

Golden files hold the exact streamed bytes of a chat completion (with a usage chunk) and of a
Responses stream, with only the ids and timestamps normalised: a change of field order, of a
null, or of the framing shows up here before a client trips on it. Real server, real mock.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agentos.api.openai_run import turn_failure
from agentos.testing import RunningServer
from tests.api.helpers import assert_documented

GOLDEN = Path(__file__).parent / "golden"
CHAT = "/v1/chat/completions"
USER_HI = [{"role": "user", "content": "hi"}]


def normalised(text: str) -> str:
    text = re.sub(r"chatcmpl-turn_[0-9a-f]{36}", "chatcmpl-ID", text)
    text = re.sub(r'"created(_at)?":\d+', lambda m: f'"created{m[1] or ""}":0', text)
    return re.sub(r"(resp|msg)_[0-9a-f]{72}", lambda m: f"{m[1]}_ID", text)


async def test_a_streamed_completion_byte_for_byte(server: RunningServer, http: aiohttp.ClientSession) -> None:
    body = {"model": "mock-1", "messages": USER_HI, "stream": True, "stream_options": {"include_usage": True}}
    async with http.post(f"{server.url}{CHAT}", json=body) as r:
        assert r.status == 200 and r.headers["Content-Type"] == "text/event-stream"
        raw = (await r.read()).decode()
    assert normalised(raw) == (GOLDEN / "chat_completion_stream.txt").read_text()


async def test_a_responses_stream_byte_for_byte(server: RunningServer, http: aiohttp.ClientSession) -> None:
    async with http.post(f"{server.url}/v1/responses", json={"model": "mock-1", "input": "hi", "stream": True}) as r:
        assert r.status == 200
        raw = (await r.read()).decode()
    assert normalised(raw) == (GOLDEN / "responses_stream.txt").read_text()


async def test_no_usage_chunk_unless_asked(server: RunningServer, http: aiohttp.ClientSession) -> None:
    async with http.post(f"{server.url}{CHAT}", json={"model": "mock-1", "messages": USER_HI, "stream": True}) as r:
        raw = (await r.read()).decode()
    assert '"usage"' not in raw and raw.endswith("data: [DONE]\n\n")


async def openai_error(response: aiohttp.ClientResponse, status: int, code: str | None = None) -> dict[str, Any]:
    """The response is OpenAI's error body with `status`."""
    assert response.status == status, await response.text()
    body: dict[str, Any] = await response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["message"] and body["error"]["type"]
    if code is not None:
        assert body["error"]["code"] == code
    error: dict[str, Any] = body["error"]
    return error


BAD_BODIES: list[tuple[str, Any, int, str | None]] = [
    ("messages-not-a-list", {"model": "mock-1", "messages": "hi"}, 400, None),
    ("model-a-number", {"model": 7, "messages": USER_HI}, 400, None),
    ("no-messages", {"model": "mock-1", "messages": []}, 400, "messages"),
    ("unknown-role", {"model": "mock-1", "messages": [{"role": "wizard", "content": "hi"}]}, 400, None),
    ("last-is-assistant", {"model": "mock-1", "messages": [{"role": "assistant", "content": "hi"}]}, 400, "messages"),
    (
        "image-part",
        {"model": "mock-1", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
        400,
        "messages[0].content",
    ),
    (
        "tool-without-id",
        {"model": "mock-1", "messages": [{"role": "tool", "content": "x"}]},
        400,
        "messages[0].tool_call_id",
    ),
    ("n-2", {"model": "mock-1", "messages": USER_HI, "n": 2}, 400, "n"),
    ("empty-input", {"model": "mock-1", "messages": [{"role": "user", "content": "  "}]}, 400, None),
    ("stream-a-string", {"model": "mock-1", "messages": USER_HI, "stream": "yes"}, 400, None),
]


@pytest.mark.parametrize(("body", "status", "param"), [b[1:] for b in BAD_BODIES], ids=[b[0] for b in BAD_BODIES])
async def test_bad_bodies_are_openai_400s(server: RunningServer, http, body: Any, status: int, param) -> None:
    async with http.post(f"{server.url}{CHAT}", json=body) as r:
        error = await openai_error(r, status)
    assert error["type"] == "invalid_request_error" and error["param"] == param


async def test_bad_json_and_other_media(server: RunningServer, http: aiohttp.ClientSession) -> None:
    json_type = {"Content-Type": "application/json"}
    async with http.post(f"{server.url}{CHAT}", data=b'{"model": "mock-1", "messages": [', headers=json_type) as r:
        await openai_error(r, 400, "malformed_json")
    async with http.post(f"{server.url}{CHAT}", data=b"model=mock-1", headers={"Content-Type": "text/plain"}) as r:
        await openai_error(r, 415)


async def test_an_unknown_model_is_a_404(server: RunningServer, http: aiohttp.ClientSession) -> None:
    async with http.post(f"{server.url}{CHAT}", json={"model": "gpt-9", "messages": USER_HI}) as r:
        error = await openai_error(r, 404, "model_not_found")
    assert error["type"] == "not_found_error"
    async with http.post(f"{server.url}/v1/responses", json={"model": "gpt-9", "input": "hi"}) as r:
        await openai_error(r, 404, "model_not_found")


async def test_huge_bodies_and_inputs(server: RunningServer, http: aiohttp.ClientSession) -> None:
    limit = server.runtime.settings.server.max_body_bytes
    huge = json.dumps({"model": "mock-1", "messages": [{"role": "user", "content": "x" * (limit + 1)}]}).encode()
    json_type = {"Content-Type": "application/json"}
    async with http.post(f"{server.url}{CHAT}", data=io.BytesIO(huge), headers=json_type) as r:
        await openai_error(r, 413)
    long_input = [{"role": "user", "content": "x" * (server.runtime.settings.kernel.max_input_chars + 1)}]
    async with http.post(f"{server.url}{CHAT}", json={"model": "mock-1", "messages": long_input}) as r:
        await openai_error(r, 400, "invalid_input")


async def test_unknown_session_and_response_ids(server: RunningServer, http: aiohttp.ClientSession) -> None:
    headers = {"X-Session-Id": "ses_nope"}
    async with http.post(f"{server.url}{CHAT}", json={"model": "mock-1", "messages": USER_HI}, headers=headers) as r:
        await openai_error(r, 404, "session_not_found")
    for rid in ("resp_nope", "resp_" + "0" * 72, "x" * 300):
        async with http.get(f"{server.url}/v1/responses/{rid}") as r:
            await openai_error(r, 404, "response_not_found")
        body = {"model": "mock-1", "input": "hi", "previous_response_id": rid}
        async with http.post(f"{server.url}/v1/responses", json=body) as r:
            await openai_error(r, 404, "previous_response_not_found")


async def test_client_tools_with_an_agent_or_a_session_are_refused(server: RunningServer, http) -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    async with http.post(f"{server.url}{CHAT}", json={"model": "mock-1", "messages": USER_HI}) as r:
        session_id = r.headers["X-Session-Id"]
    body = {"model": "mock-1", "messages": USER_HI, "tools": tools}
    async with http.post(f"{server.url}{CHAT}", json=body, headers={"X-Session-Id": session_id}) as r:
        error = await openai_error(r, 400)
    assert error["param"] == "tools"


async def test_a_session_of_another_model_is_refused(server: RunningServer, http: aiohttp.ClientSession) -> None:
    async with http.post(f"{server.url}{CHAT}", json={"model": "mock-1", "messages": USER_HI}) as r:
        session_id = r.headers["X-Session-Id"]
    async with http.post(f"{server.url}/v1/agents", json={"name": "other", "tools": []}) as r:
        assert r.status == 201
    body = {"model": "other", "messages": USER_HI}
    async with http.post(f"{server.url}{CHAT}", json=body, headers={"X-Session-Id": session_id}) as r:
        error = await openai_error(r, 400)
    assert error["param"] == "model"


async def test_real_answers_match_the_documented_schemas(server: RunningServer, http: aiohttp.ClientSession) -> None:
    async with http.get(f"{server.url}/v1/models") as r:
        assert_documented(await r.json(), "ModelList")
    async with http.post(f"{server.url}{CHAT}", json={"model": "mock-1", "messages": USER_HI}) as r:
        assert_documented(await r.json(), "ChatCompletion")
    async with http.post(f"{server.url}/v1/responses", json={"model": "mock-1", "input": "hi"}) as r:
        response = await r.json()
        assert_documented(response, "OpenAIResponse")
    async with http.get(f"{server.url}/v1/responses/{response['id']}") as r:
        assert_documented(await r.json(), "OpenAIResponse")
    async with http.post(f"{server.url}{CHAT}", json={"model": "nope", "messages": USER_HI}) as r:
        assert_documented(await r.json(), "OpenAIError")


@pytest.mark.parametrize(
    "field",
    [{"conversation": "conv_1"}, {"background": True}, {"tools": [{"type": "x"}]}],
    ids=["conversation", "background", "tools"],
)
async def test_responses_refuse_what_they_do_not_support(server: RunningServer, http, field: dict[str, Any]) -> None:
    async with http.post(f"{server.url}/v1/responses", json={"model": "mock-1", "input": "hi", **field}) as r:
        error = await openai_error(r, 400)
    assert error["param"] == next(iter(field))


@pytest.mark.parametrize(
    ("name", "reason", "status"),
    [
        ("turn.cancelled", "superseded", 409),
        ("turn.cancelled", "cancelled", 409),
        ("turn.cancelled", "shutdown", 503),
        ("turn.failed", "provider_timeout", 502),
        ("turn.failed", "store_unavailable", 503),
        ("turn.failed", "internal_error", 500),
        ("turn.failed", "max_turns: 8 model turns without an answer", 500),
    ],
)
def test_how_a_turn_that_did_not_complete_is_answered(name: str, reason: str, status: int) -> None:
    assert turn_failure(name, {"reason": reason})[:2] == (status, reason)
