"""The Responses API's wire format, pure: `response` objects and streamed events, as OpenAI
sends them. The server's front door (`agentos.api.openai_responses`) and the mock provider
(`agentos.mock.responses_wire`) write with these; the `openai-responses` client
(`agentos.providers.openai_responses`) reads what they write.
"""

from __future__ import annotations

from typing import Any

import msgspec

_encode = msgspec.json.encode


def response_object(
    rid: str,
    created_s: int,
    model: str,
    status: str,
    text: str | None,
    *,
    usage: dict[str, int] | None = None,
    previous: str | None = None,
    error: dict[str, str] | None = None,
    output: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A `response` object: `text` None while the answer is not there yet (no output item);
    `output`, when given, its output items instead (function calls)."""
    if output is None:
        output = [] if text is None else [message_item(rid, "completed" if status == "completed" else status, text)]
    return {
        "id": rid,
        "object": "response",
        "created_at": created_s,
        "status": status,
        "model": model,
        "output": output,
        "usage": None if usage is None else responses_usage(usage),
        "error": error,
        "incomplete_details": None,
        "instructions": None,
        "metadata": {},
        "parallel_tool_calls": False,
        "previous_response_id": previous,
        "store": True,
        "temperature": None,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_p": None,
        "truncation": "disabled",
    }


def message_item(rid: str, status: str, text: str | None) -> dict[str, Any]:
    content = [] if text is None else [output_text(text)]
    return {"id": item_id(rid), "type": "message", "status": status, "role": "assistant", "content": content}


def item_id(rid: str) -> str:
    return "msg_" + rid.removeprefix("resp_")


def output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": []}


def responses_usage(usage: dict[str, int]) -> dict[str, Any]:
    """Chat-completion usage (`prompt_tokens`, `completion_tokens`, and `cache_read_tokens` when
    known) as the Responses API's."""
    prompt, completion = usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": usage.get("cache_read_tokens", 0)},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + completion,
    }


class EventWriter:
    """Numbers a response's streamed events (`sequence_number` from 0) and frames them as SSE,
    `event:` the type, as OpenAI sends them."""

    __slots__ = ("_seq",)

    def __init__(self) -> None:
        self._seq = 0

    def event(self, kind: str, **fields: Any) -> bytes:
        data = {"type": kind, "sequence_number": self._seq, **fields}
        self._seq += 1
        return b"".join((b"event: ", kind.encode(), b"\ndata: ", _encode(data), b"\n\n"))

    def opening(self, response: dict[str, Any]) -> bytes:
        """`response.created`, `response.in_progress`, the message item and its text part."""
        rid = response["id"]
        part = {"item_id": item_id(rid), "output_index": 0, "content_index": 0}
        return b"".join(
            (
                self.event("response.created", response=response),
                self.event("response.in_progress", response=response),
                self.event("response.output_item.added", output_index=0, item=message_item(rid, "in_progress", None)),
                self.event("response.content_part.added", **part, part=output_text("")),
            )
        )

    def delta(self, rid: str, text: str) -> bytes:
        return self.event(
            "response.output_text.delta", item_id=item_id(rid), output_index=0, content_index=0, delta=text, logprobs=[]
        )

    def closing(self, response: dict[str, Any], text: str) -> bytes:
        """The text's end, the item's, and `response.completed` with the whole response."""
        rid = response["id"]
        part = {"item_id": item_id(rid), "output_index": 0, "content_index": 0}
        return b"".join(
            (
                self.event("response.output_text.done", **part, text=text, logprobs=[]),
                self.event("response.content_part.done", **part, part=output_text(text)),
                self.event("response.output_item.done", output_index=0, item=message_item(rid, "completed", text)),
                self.event("response.completed", response=response),
            )
        )
