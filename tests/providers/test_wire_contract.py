"""What every new wire client does the same, against the mock over real HTTP, one suite over
both (`anthropic`, `openai-responses`): text as deltas then one completion, parallel tool calls,
tool results read back, `length` at the token limit, errors before the first token retryable
(the router falls back) and after it final, and a request the wire cannot express refused before
anything is sent; the shared transport's first-token deadline and an early close. What differs
per wire (the request's shape, cache tokens, headers) is in test_anthropic.py and
test_openai_responses.py; every documented ending, the scripted ones and the others (a refusal,
a content filter), maps to its OpenAI finish reason."""

from __future__ import annotations

from contextlib import aclosing
from typing import Any

import aiohttp
import pytest

from agentos.config.provider import ProviderKind
from agentos.errors import ProviderHTTPError, ProviderProtocolError, ProviderTimeout, ProviderUnsupported
from agentos.providers.base import ChatRequest, TextDelta
from agentos.providers.transport import WireClient
from tests.providers.wire_helpers import (
    AGENT_TOOLS,
    MockFactory,
    chat,
    collect,
    deltas_before_failure,
    wire_client,
)

# Per wire: the HTTP status of an injected error (Anthropic's is its 529 overloaded_error).
INJECTED_STATUS = {"anthropic": 529, "openai-responses": 500}
both_wires = pytest.mark.parametrize("kind", ["anthropic", "openai-responses"])


@both_wires
async def test_text_streams_as_deltas_then_one_completion(
    mock_factory: MockFactory, session: aiohttp.ClientSession, kind: ProviderKind
) -> None:
    mock = await mock_factory(tokens=4)
    deltas, completion = await collect(wire_client(mock, session, kind), chat("hello there"))
    assert deltas == ["tok "] * 4
    assert (completion.text, completion.finish_reason, completion.tool_calls) == ("tok tok tok tok ", "stop", ())
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (2, 4)


@both_wires
async def test_parallel_tool_calls_come_back_whole(
    mock_factory: MockFactory, session: aiohttp.ClientSession, kind: ProviderKind
) -> None:
    mock = await mock_factory(scenario="parallel")
    deltas, completion = await collect(wire_client(mock, session, kind), chat("go", tools=AGENT_TOOLS))
    assert deltas == [] and completion.finish_reason == "tool_calls"
    assert [(c.call_id[:7], c.name, c.arguments) for c in completion.tool_calls] == [
        ("call_0_", "run_command", '{"command":["sh","-c","echo step-1 >> effects.log; echo one"]}'),
        ("call_1_", "run_command", '{"command":["sh","-c","echo step-2 >> effects.log; echo two"]}'),
    ]


@both_wires
async def test_tool_results_go_back(
    mock_factory: MockFactory, session: aiohttp.ClientSession, kind: ProviderKind
) -> None:
    """The `tools` script counts the tool results after the last user message: after two it asks
    `ask_human`, so that answer proves the mock read both results (Anthropic: one merged message)."""
    mock = await mock_factory(scenario="tools")
    calls = [
        {"id": i, "type": "function", "function": {"name": "run_command", "arguments": "{}"}} for i in ("c1", "c2")
    ]
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "tool_call_id": "c1", "content": "one"},
        {"role": "tool", "tool_call_id": "c2", "content": "two"},
    ]
    request = ChatRequest(messages=messages, tools=AGENT_TOOLS, retry=False)
    _, completion = await collect(wire_client(mock, session, kind), request)
    assert [c.name for c in completion.tool_calls] == ["ask_human"]


@both_wires
async def test_the_token_limit_is_length(
    mock_factory: MockFactory, session: aiohttp.ClientSession, kind: ProviderKind
) -> None:
    mock = await mock_factory(tokens=4)
    deltas, cut = await collect(wire_client(mock, session, kind, max_tokens=2), chat())
    assert (deltas, cut.finish_reason, cut.usage.completion_tokens) == (["tok "] * 2, "length", 2)


@both_wires
@pytest.mark.parametrize("fault", ["fail_every", "error_rate"])
async def test_refused_requests_are_retryable_http_errors(
    mock_factory: MockFactory, session: aiohttp.ClientSession, kind: ProviderKind, fault: str
) -> None:
    mock = await mock_factory(retry_after_s=3, **({"fail_every": 1} if fault == "fail_every" else {"error_rate": 1.0}))
    with pytest.raises(ProviderHTTPError) as raised:
        await collect(wire_client(mock, session, kind), chat())
    status = 429 if fault == "fail_every" else INJECTED_STATUS[kind]
    assert raised.value.status_code == status and raised.value.retryable
    assert raised.value.retry_after_s == (3.0 if status == 429 else None)


@both_wires
async def test_an_error_event_before_the_first_token_is_retryable(
    mock_factory: MockFactory, session: aiohttp.ClientSession, kind: ProviderKind
) -> None:
    mock = await mock_factory(stream_error_after=0)
    deltas, error = await deltas_before_failure(wire_client(mock, session, kind), chat())
    assert deltas == []
    assert isinstance(error, ProviderHTTPError) and error.status_code == INJECTED_STATUS[kind] and error.retryable


@both_wires
async def test_an_error_event_after_the_first_token_ends_the_stream(
    mock_factory: MockFactory, session: aiohttp.ClientSession, kind: ProviderKind
) -> None:
    mock = await mock_factory(stream_error_after=2)
    deltas, error = await deltas_before_failure(wire_client(mock, session, kind), chat())
    assert deltas == ["tok "] * 2
    assert isinstance(error, ProviderProtocolError) and not error.retryable


@both_wires
async def test_an_unsupported_request_never_reaches_the_provider(
    mock_factory: MockFactory, session: aiohttp.ClientSession, kind: ProviderKind
) -> None:
    mock = await mock_factory()
    with pytest.raises(ProviderUnsupported, match=f"the {kind} wire cannot express a tool of type 'web_search'"):
        await collect(wire_client(mock, session, kind), chat(tools=[{"type": "web_search"}]))
    assert mock.stats.requests == 0


@both_wires
async def test_no_answer_by_the_first_token_deadline_is_a_timeout(
    mock_factory: MockFactory, session: aiohttp.ClientSession, kind: ProviderKind
) -> None:
    """The shared transport's deadline holds on each wire, and the request is abandoned upstream."""
    mock = await mock_factory(hang_rate=1.0)
    client = wire_client(mock, session, kind, first_token_timeout_s=0.3)
    with pytest.raises(ProviderTimeout, match="first_token"):
        await collect(client, chat())
    await mock.stats.wait_for(lambda s: s.hung == 1 and s.in_flight == 0, what="the hung request to be let go")


@both_wires
async def test_a_stream_that_stalls_after_its_first_token_is_an_idle_timeout(
    mock_factory: MockFactory, session: aiohttp.ClientSession, kind: ProviderKind
) -> None:
    mock = await mock_factory(tokens=3, tps=2)  # half a second between tokens
    deltas, error = await deltas_before_failure(wire_client(mock, session, kind, idle_timeout_s=0.2), chat())
    assert deltas == ["tok "]
    assert isinstance(error, ProviderTimeout) and "idle" in str(error)
    await mock.stats.wait_for(lambda s: s.aborted == 1 and s.in_flight == 0, what="the stalled stream to be aborted")


@both_wires
async def test_closing_the_stream_early_aborts_the_upstream_request(
    mock_factory: MockFactory, session: aiohttp.ClientSession, kind: ProviderKind
) -> None:
    mock = await mock_factory(tokens=50, tps=100)
    async with aclosing(wire_client(mock, session, kind).stream(chat())) as stream:
        first = await anext(stream)
    assert isinstance(first, TextDelta)
    await mock.stats.wait_for(lambda s: s.aborted == 1 and s.in_flight == 0, what="the stream to be aborted")
    assert mock.stats.completed == 0


@both_wires
async def test_a_mid_stream_failure_switched_on_while_running(
    mock_factory: MockFactory, session: aiohttp.ClientSession, kind: ProviderKind
) -> None:
    """`POST /faults {"stream_error_after": 1}` (the fault campaign's switch) cuts the next answers."""
    mock = await mock_factory()
    async with session.post(f"{mock.url.removesuffix('/v1')}/faults", json={"stream_error_after": 1}) as response:
        assert response.status == 200 and (await response.json())["stream_error_after"] == 1
    deltas, error = await deltas_before_failure(wire_client(mock, session, kind), chat())
    assert deltas == ["tok "] and isinstance(error, ProviderProtocolError)


def _ending_events(kind: ProviderKind, reason: str) -> list[str]:
    """The last events of an answer that ended for `reason`, as the wire sends them."""
    if kind == "anthropic":
        delta = f'{{"type":"message_delta","delta":{{"stop_reason":"{reason}"}},"usage":{{"output_tokens":1}}}}'
        return [delta, '{"type":"message_stop"}']
    if reason == "completed":
        return ['{"type":"response.completed","response":{"usage":{"input_tokens":1,"output_tokens":1}}}']
    return [f'{{"type":"response.incomplete","response":{{"incomplete_details":{{"reason":"{reason}"}}}}}}']


@pytest.mark.parametrize(
    ("kind", "reason", "finish"),
    [
        ("anthropic", "end_turn", "stop"),
        ("anthropic", "stop_sequence", "stop"),
        ("anthropic", "max_tokens", "length"),
        ("anthropic", "refusal", "content_filter"),
        ("openai-responses", "completed", "stop"),
        ("openai-responses", "max_output_tokens", "length"),
        ("openai-responses", "content_filter", "content_filter"),
    ],
)
async def test_every_ending_maps_to_an_openai_finish_reason(
    mock_factory: MockFactory, session: aiohttp.ClientSession, kind: ProviderKind, reason: str, finish: str
) -> None:
    """The endings the mock does not script (a refusal, a content filter), read by the wire
    client's own decoder from the events as the services document them."""
    client = wire_client(await mock_factory(), session, kind)
    assert isinstance(client, WireClient)
    answer = client.answer()
    for data in _ending_events(kind, reason):
        answer.apply(client.decode(data))
    assert answer.completion().finish_reason == finish
