"""The OpenAI Responses API as the mock provider speaks it (`POST /v1/responses`, streamed):
the reading of its requests into the chat messages the answer scripts take, and the events of
an answer, written with `agentos.providers.responses_wire` as the server's front door writes
them.

A text answer is `response.created`, `response.in_progress`, the message item and its text part
added, `response.output_text.delta`s, their `.done`s, then `response.completed` (or
`response.incomplete` when `max_output_tokens` cut it). Tool calls are one `function_call` item
each: `response.output_item.added`, `response.function_call_arguments.delta`s and `.done`,
`response.output_item.done`. A failure in the stream is `response.failed`.
"""

from __future__ import annotations

from typing import Any

import msgspec

from agentos.mock.scenario import AnswerPlan, ToolCallPlan, prompt_tokens, split_arguments
from agentos.mock.wire import Asked, Ending, text_pieces
from agentos.providers.responses_wire import (
    EventWriter,
    item_id,
    message_item,
    output_text,
    response_object,
)

_encode = msgspec.json.Encoder().encode


def read_request(body: dict[str, Any]) -> Asked:
    """What a Responses API request asks, its instructions and input items as chat messages:
    `function_call_output` items become `tool` messages (the scripts count them)."""
    messages: list[dict[str, Any]] = []
    if body.get("instructions"):
        messages.append({"role": "system", "content": body["instructions"]})
    given = body.get("input")
    items = [{"role": "user", "content": given}] if isinstance(given, str) else given or []
    for item in items:
        if isinstance(item, dict):
            messages.append(_chat_message(item))
    tools = frozenset(
        str(t.get("name")) for t in body.get("tools") or () if isinstance(t, dict) and t.get("type") == "function"
    )
    limit = body.get("max_output_tokens")
    return Asked(
        messages=messages,
        tools=tools,
        max_tokens=limit if isinstance(limit, int) and limit > 0 else None,
        stream=bool(body.get("stream")),
        model=str(body.get("model") or ""),
        cache_prefix=_cache_prefix(messages),
    )


def _chat_message(item: dict[str, Any]) -> dict[str, Any]:
    kind = item.get("type") or "message"
    if kind == "function_call":
        call = {"id": item.get("call_id"), "type": "function", "function": {"name": item.get("name")}}
        return {"role": "assistant", "content": None, "tool_calls": [call]}
    if kind == "function_call_output":
        return {"role": "tool", "tool_call_id": item.get("call_id"), "content": item.get("output")}
    return {"role": item.get("role"), "content": item.get("content")}


def _cache_prefix(messages: list[dict[str, Any]]) -> tuple[bytes, int] | None:
    """OpenAI caches prompts by their prefix on its own: all but the last message here."""
    prefix = messages[:-1]
    words = prompt_tokens(prefix)
    return (_encode(prefix), words) if words else None


def _call_item(rid: str, index: int, call: ToolCallPlan, status: str, arguments: str) -> dict[str, Any]:
    return {
        "id": f"fc_{rid.removeprefix('resp_')}_{index}",
        "type": "function_call",
        "status": status,
        "call_id": call.call_id,
        "name": call.name,
        "arguments": arguments,
    }


class ResponseWriter:
    """Builds the events of one streamed response."""

    def __init__(self, response_id: str, created_s: int, model: str) -> None:
        self._rid = response_id
        self._start = response_object(response_id, created_s, model, "in_progress", None)
        self._events = EventWriter()
        self._plan = AnswerPlan(tokens=0)

    def frames(self, plan: AnswerPlan, opening: Ending) -> list[bytes]:
        """The content's frames, the first led by `response.created` and `response.in_progress`."""
        del opening  # the usage comes with response.completed only
        self._plan = plan
        frames = self._call_frames(plan) if plan.calls else self._text_frames(plan)
        head = self._events.event("response.created", response=self._start)
        frames[0] = head + self._events.event("response.in_progress", response=self._start) + frames[0]
        return frames

    def _text_frames(self, plan: AnswerPlan) -> list[bytes]:
        part = {"item_id": item_id(self._rid), "output_index": 0, "content_index": 0}
        added = self._events.event(
            "response.output_item.added", output_index=0, item=message_item(self._rid, "in_progress", None)
        ) + self._events.event("response.content_part.added", **part, part=output_text(""))
        frames = [
            self._events.event("response.output_text.delta", **part, delta=piece, logprobs=[])
            for piece in text_pieces(plan)
        ]
        frames[0] = added + frames[0]
        return frames

    def _call_frames(self, plan: AnswerPlan) -> list[bytes]:
        frames = []
        for index, call in enumerate(plan.calls):
            item = _call_item(self._rid, index, call, "in_progress", "")
            frames.append(self._events.event("response.output_item.added", output_index=index, item=item))
            where = {"item_id": item["id"], "output_index": index}
            for piece in split_arguments(call.arguments):
                frames.append(self._events.event("response.function_call_arguments.delta", **where, delta=piece))
            done = self._events.event("response.function_call_arguments.done", **where, arguments=call.arguments)
            item = _call_item(self._rid, index, call, "completed", call.arguments)
            frames.append(done + self._events.event("response.output_item.done", output_index=index, item=item))
        return frames

    def closing(self, ending: Ending) -> bytes:
        response = self.whole(self._plan, ending)
        head = b""
        if not self._plan.calls:
            item = response["output"][0]
            head = self._text_done(item["content"][0]["text"], item)
        return head + self._events.event(f"response.{response['status']}", response=response)

    def whole(self, plan: AnswerPlan, ending: Ending) -> dict[str, Any]:
        """The answer as one `response` object (`completed`, or `incomplete` at the token limit)."""
        status = "incomplete" if ending.finish == "length" else "completed"
        usage = {
            "prompt_tokens": ending.prompt_tokens,
            "completion_tokens": ending.completion_tokens,
            "cache_read_tokens": ending.cache_read,
        }
        if plan.calls:
            output = [_call_item(self._rid, i, c, "completed", c.arguments) for i, c in enumerate(plan.calls)]
        else:
            output = [message_item(self._rid, status, "".join(text_pieces(plan)))]
        response = response_object(
            self._rid, self._start["created_at"], self._start["model"], status, None, usage=usage, output=output
        )
        if status == "incomplete":
            response["incomplete_details"] = {"reason": "max_output_tokens"}
        return response

    def _text_done(self, text: str, item: dict[str, Any]) -> bytes:
        part = {"item_id": item_id(self._rid), "output_index": 0, "content_index": 0}
        return b"".join(
            (
                self._events.event("response.output_text.done", **part, text=text, logprobs=[]),
                self._events.event("response.content_part.done", **part, part=output_text(text)),
                self._events.event("response.output_item.done", output_index=0, item=item),
            )
        )

    def failure(self, sent: int) -> bytes:
        """`response.failed`, after `response.created` and `.in_progress` as the service sends them."""
        head = b""
        if sent == 0:
            head = self._events.event("response.created", response=self._start)
            head += self._events.event("response.in_progress", response=self._start)
        error = {"code": "server_error", "message": "mock: injected failure in the stream"}
        failed = self._start | {"status": "failed", "error": error}
        return head + self._events.event("response.failed", response=failed)
