"""A plain chat turn: one model call, its tokens streamed to the client, its answer stored."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import aclosing
from typing import Any

from agentos.clock import Clock
from agentos.errors import ProviderProtocolError
from agentos.kernel import ProviderReleased
from agentos.metrics import Metrics
from agentos.providers.base import CallContext, ChatRequest, Completion, Message, Provider
from agentos.runtime.driver import Driver
from agentos.runtime.transcript import begin, message
from agentos.runtime.turn import Outcome, Turn, TurnSink
from agentos.store.base import Store
from agentos.telemetry import NO_TRACING, Tracing


class ChatTurns:
    def __init__(
        self,
        driver: Driver,
        store: Store,
        provider: Provider,
        metrics: Metrics,
        clock: Clock,
        history_max: int,
        on_usage: Callable[[str, int], None] | None = None,
        tracing: Tracing = NO_TRACING,
    ) -> None:
        self._tracing = tracing
        self._on_usage = on_usage  # (tenant_id, tokens): the tenant's tokens per day, as a run's model calls
        self._driver = driver
        self._store = store
        self._provider = provider
        self._metrics = metrics
        self._clock = clock
        self._history_max = history_max

    async def run(self, turn: Turn, sink: TurnSink, partial: list[str]) -> Outcome:
        messages: list[Message] = [*await begin(self._store, turn, sink, self._history_max)]
        if turn.prompt is None:
            messages.append({"role": "user", "content": turn.input})
        else:
            messages = turn.prompt
        if self._tracing.on and (turn.permit is not None or self._driver.cluster is not None):
            # Only a turn that waits for its permit (or asks the cluster's limit) gets the span.
            with self._tracing.span("agentos.provider_permit", {"agentos.tenant.id": turn.tenant_id}):
                await self._driver.open_stream(turn.turn_id, turn.permit, turn.tenant_id, turn.submitted_s)
        else:
            await self._driver.open_stream(turn.turn_id, turn.permit, turn.tenant_id, turn.submitted_s)
        try:
            completion = await self._stream(turn, sink, messages, partial)
        finally:
            self._driver.handle(ProviderReleased(turn.turn_id))
        turn.finishing = True
        usage = {
            "prompt_tokens": completion.usage.prompt_tokens,
            "completion_tokens": completion.usage.completion_tokens,
        }
        answer = message(turn, "assistant", completion.text, "completed", usage)
        self._metrics.tokens_prompt.inc(completion.usage.prompt_tokens)
        self._metrics.tokens_completion.inc(completion.usage.completion_tokens)
        if self._on_usage is not None:
            self._on_usage(turn.tenant_id, completion.usage.prompt_tokens + completion.usage.completion_tokens)
        data: dict[str, Any] = {"turn_id": turn.turn_id, "usage": usage, "finish_reason": completion.finish_reason}
        if completion.tool_calls:  # only a client's own tools (`Turn.tools`) are offered to the model
            calls = completion.tool_calls
            data["tool_calls"] = [{"id": c.call_id, "name": c.name, "arguments": c.arguments} for c in calls]
        return Outcome("turn.completed", data, answer)  # stored with turn.completed (Turns._finish)

    async def _stream(self, turn: Turn, sink: TurnSink, messages: list[Message], partial: list[str]) -> Completion:
        first = True
        # aclosing: an error in this loop's body (the client went away) must abort the
        # upstream now, not whenever the generator is collected.
        context = CallContext(turn.tenant_id, turn.key_id, "", "", turn.session_id, turn.turn_id)
        request = ChatRequest(messages, tools=turn.tools, context=context)
        async with aclosing(self._provider.stream(request)) as stream:
            async for item in stream:
                if isinstance(item, Completion):
                    return item
                if first:
                    first = False
                    self._metrics.ttft_ms.observe((self._clock.now() - turn.submitted_s) * 1000)
                partial.append(item.text)
                await sink.send(turn.next_event_id(), "token", {"delta": item.text})
        raise ProviderProtocolError("the provider stream ended without a completion")  # pragma: no cover
