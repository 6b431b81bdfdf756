"""The same closed-loop turn as `ServerTarget`, sent through the OpenAI-compatible front door.

One session per worker, made with `POST /v1/sessions` exactly as the native target makes it;
each turn is `POST /v1/chat/completions` with `X-Session-Id` naming it, `stream: true`, and the
plain model: the same turn of the same session, so `agentos bench sweep --api openai` against
`--api native` measures what the front door adds per turn (docs/openai.md, "Overhead").
"""

from __future__ import annotations

from typing import Any, Literal

import aiohttp
import msgspec

from agentos.mock.chat_stream import DONE_DATA
from agentos.providers.sse_parser import SSEEvent
from agentos_bench.load.targets import EventVerdict, ServerTarget, TurnSample, timed_stream

Api = Literal["native", "openai"]
APIS: tuple[Api, ...] = ("native", "openai")
PLAIN_MODEL = "mock-1"  # the bench profiles' provider model: the plain chat turn, as the native target's


class OpenAITarget(ServerTarget):
    """Agent OS through `/v1/chat/completions`; rows keep the name "server" (the overhead
    report compares them with the direct rows as it does the native ones)."""

    def __init__(
        self, base_url: str, *, api_key: str | None = None, name: str = "server", model: str = PLAIN_MODEL
    ) -> None:
        super().__init__(base_url, api_key=api_key, name=name)
        self._chat_url = f"{self.base_url}/v1/chat/completions"
        self._chat = msgspec.json.encode(
            {"model": model, "stream": True, "messages": [{"role": "user", "content": "hello"}]}
        )

    async def turn(self, http: aiohttp.ClientSession, worker: str | None, timeout_s: float) -> TurnSample:
        headers = {**self._auth, "X-Session-Id": str(worker)}
        return await timed_stream(http, self._chat_url, self._chat, timeout_s, openai_verdict, headers)


def openai_verdict(event: SSEEvent, seen_first: bool = False) -> EventVerdict:
    """Content is "first", `[DONE]` is "ok"; an error line (then `[DONE]`) fails the turn: a
    superseded or cancelled turn as "cancelled", anything else as "turn_failed"."""
    if event.data == DONE_DATA:
        return "ok"
    if seen_first and not event.data.startswith('{"error"'):
        return None  # only the end matters now: skip decoding the rest of the chunks
    chunk: dict[str, Any] = msgspec.json.decode(event.data)
    if isinstance(chunk.get("error"), dict):
        return "cancelled" if chunk["error"].get("type") == "conflict_error" else "turn_failed"
    for choice in chunk.get("choices") or ():
        if (choice.get("delta") or {}).get("content"):
            return "first"
    return None
