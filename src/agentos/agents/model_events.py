"""The data of a model call's events, `model.started` and `model.completed`: a run's timeline.

Tokens are live only (`agentos.agents.engine`), so without these a replayed run showed its tool
calls and human requests but not the model calls between them. Each call adds two journal rows,
each written in the same write as its step (no commit of its own): `model.started` with the
step's start, `model.completed` with its reply.

`model.completed` summarises the reply, it does not copy it: the step's payload holds the
whole reply, and a run's answer is `run.completed`'s `result`. The text is cut at
`TEXT_MAX_CHARS` (`text_chars` is its full length); tool calls are named, their arguments come
with each `tool.call` (or `human.requested`, for one awaiting approval).

A call cut off by a crash is made again after the restart: its step then has a second
`model.started` (`attempt` 2) and one `model.completed`, never two.
"""

from __future__ import annotations

from typing import Any

TEXT_MAX_CHARS = 500


def model_started(operation_id: str, attempt: int) -> dict[str, Any]:
    return {"operation_id": operation_id, "attempt": attempt}


def model_completed(operation_id: str, reply: dict[str, Any], duration_ms: int) -> dict[str, Any]:
    """`reply`: the model step's output (`agentos.agents.runner`); `duration_ms`: since its start."""
    text = reply["text"] or ""
    return {
        "operation_id": operation_id,
        "duration_ms": max(0, duration_ms),  # wall clock: never negative if it steps back
        "finish_reason": reply["finish_reason"],
        "text": text[:TEXT_MAX_CHARS],
        "text_chars": len(text),
        "tool_calls": [{"call_id": c["id"], "name": c["name"]} for c in reply["tool_calls"]],
        "usage": reply["usage"],
    }
